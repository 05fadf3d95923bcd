// The model loader: a checkpoint (or a config with random weights) made into this rank's
// Model — the generics bound (Shards resolved here, once, for every command), the memory
// checked, the weights read through checkpoint/ and laid out by layers/. It sits above both:
// checkpoint/ reads files, layers/ computes, the loader joins them.
#pragma once
#include <memory>
#include <string>

#include "core/backend.h"
#include "layers/model.h"
#include "layers/stage.h"
#include "parallel/communicator.h"

namespace linnet {

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
// `stage`: this rank's pipeline stage (layers/stage.h): only its layers and ends are read, and
// the memory check counts only them.
LoadedModel load_model(const std::string& dir, RunOptions options, Backend& backend, Communicator& comm,
                       int ranks_sharing = 1, const StagePlace& stage = {});
// The same for a config with deterministic random weights (RandomWeights, seed 0): what the
// benchmarks run at a real model's shapes without its checkpoint.
LoadedModel random_model(const ModelConfig& config, RunOptions options, Backend& backend, Communicator& comm,
                         int ranks_sharing = 1, const StagePlace& stage = {});

}  // namespace linnet
