// Weights from a Hugging Face checkpoint directory: each rank reads only its own slices
// (SPEC §2), and every tensor is checked for presence and shape before it is read.
#pragma once
#include <memory>
#include <string>

#include "checkpoint/checkpoint_dir.h"
#include "layers/model.h"

namespace linnet {

class CheckpointWeights final : public WeightSource {
 public:
  // `declared`: config.json's torch_dtype; a tensor stored in another dtype is an error (a
  // checkpoint whose files disagree with its config is broken, and would load lossy).
  CheckpointWeights(const CheckpointDir& dir, DType declared) : dir_(dir), declared_(declared) {}
  Tensor read(const ParamSpec& p, int64_t shard) override;

 private:
  const CheckpointDir& dir_;
  DType declared_;
};

// Everything a rank needs to run a checkpoint: its config, the bound generics, and the model.
struct LoadedModel {
  ModelConfig config;
  Generics generics;
  std::unique_ptr<Model> model;
};

// Reads config.json, binds the generics (Shards = comm.size() unless options say otherwise),
// checks every parameter's shape, and loads this rank's slices onto the backend.
LoadedModel load_model(const std::string& dir, RunOptions options, Backend& backend, Communicator& comm);

}  // namespace linnet
