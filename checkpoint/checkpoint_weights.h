// Weights from a Hugging Face checkpoint directory: each rank reads only its own slices
// (SPEC §2), and every tensor is checked for presence and shape before it is read.
#pragma once
#include <memory>
#include <set>
#include <vector>
#include <string>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/packed_file.h"
#include "layers/model.h"

namespace linnet {

class CheckpointWeights final : public WeightSource {
 public:
  // `declared`: config.json's torch_dtype; a tensor stored in another dtype is an error (a
  // checkpoint whose files disagree with its config is broken, and would load lossy).
  CheckpointWeights(const CheckpointDir& dir, DType declared) : dir_(dir), declared_(declared), packed_(dir.dir()) {}
  Tensor read(const ParamSpec& p, int64_t shard) override;
  // From the checkpoint's packed file (checkpoint/packed_file.h) where it holds this matrix.
  Tensor packed(const std::string& name, const std::string& format, DType dtype, const Shape& shape) override {
    return packed_.matrix(name, format, dtype, shape);
  }
  // Every matrix came from the packed file (none of its matrices was refused).
  bool used_packed_file() const { return packed_.used() && packed_.refused() == 0; }
  double packed_verify_seconds() const { return packed_.verify_seconds(); }
  // Tensors of the files that no read() asked for (buffers transformers ignores left out).
  std::vector<std::string> unused(const ModelConfig& config) const;
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

// Everything a rank needs to run a checkpoint: its config, the bound generics, and the model.
struct LoadedModel {
  ModelConfig config;
  Generics generics;
  std::unique_ptr<Model> model;
  bool from_packed_file = false;  // its matrices mapped from the checkpoint's packed file
};

// options with Shards resolved for a shard group: unset (0) is the group's size; a given
// Shards must equal it (an Error saying how to get it otherwise).
RunOptions with_shards(RunOptions options, const Communicator& comm);

// Reads config.json, binds the generics (Shards = comm.size() unless options say otherwise),
// checks that the rank's share fits the backend's memory (`ranks_sharing` ranks of this size
// on one device or host), checks every parameter's shape, and loads this rank's slices onto
// the backend. Shard 0 warns once about tensors the files hold but the model does not use.
LoadedModel load_model(const std::string& dir, RunOptions options, Backend& backend, Communicator& comm,
                       int ranks_sharing = 1);
// The same for a config with deterministic random weights (RandomWeights, seed 0): what the
// benchmarks run at a real model's shapes without its checkpoint.
LoadedModel random_model(const ModelConfig& config, RunOptions options, Backend& backend, Communicator& comm,
                         int ranks_sharing = 1);

}  // namespace linnet
