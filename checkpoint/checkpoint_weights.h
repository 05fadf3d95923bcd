// Weights from a Hugging Face checkpoint directory: each rank reads only its own slices
// (docs/entries.md "Weights and shards"), and every tensor is checked for presence and shape before
// it is read.
#pragma once
#include <set>
#include <vector>
#include <string>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/packed_file.h"
#include "layers/weight_source.h"

namespace linnet {

// config.json's num_hidden_layers against the layers the files hold (model.layers.<i>.…):
// refused, naming both, when the config asks for more.
void expect_layers(const CheckpointDir& dir, int64_t layers);

class CheckpointWeights final : public WeightSource {
 public:
  // `declared`: config.json's torch_dtype; a tensor stored in another dtype is an error (a
  // checkpoint whose files disagree with its config is broken, and would load lossy).
  CheckpointWeights(const CheckpointDir& dir, DType declared) : dir_(dir), declared_(declared), packed_(dir.dir()) {}
  Tensor read(const ParamSpec& p, int64_t shard) override;
  // Every tensor of `specs` is in the files with its shape: checked from the headers before
  // anything is read or allocated, so a config that asks for more than the files hold is
  // refused at once.
  void expect_all(const std::vector<ParamSpec>& specs) const;
  // From the checkpoint's packed file (checkpoint/packed_file.h) where it holds this matrix.
  Tensor packed(const std::string& name, const std::string& format, DType dtype, const Shape& shape) override {
    return packed_.matrix(name, format, dtype, shape);
  }
  // Every matrix came from the packed file (none of its matrices was refused).
  bool used_packed_file() const { return packed_.used() && packed_.refused() == 0; }
  double packed_verify_seconds() const { return packed_.verify_seconds(); }
  // Tensors of the files that no read() asked for and no rank holds (`specs`: every parameter of
  // the model; an expert another rank holds is not unused), buffers transformers ignores left out.
  std::vector<std::string> unused(const ModelConfig& config, const std::vector<ParamSpec>& specs) const;
  // The names read() was asked for (what this rank read of the checkpoint).
  const std::set<std::string>& read_names() const { return used_; }
  // The first NaN or Inf this rank's reads found ("" when none): file, tensor and element.
  const std::string& non_finite() const { return non_finite_; }

 private:
  void check_finite(const ParamSpec& p, const Tensor& t, int64_t row0, int64_t col0);
  std::string non_finite_;
  const CheckpointDir& dir_;
  DType declared_;
  std::set<std::string> used_;
  PackedFile packed_;
};

}  // namespace linnet
