#include "runtime/loader.h"

#include <chrono>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_weights.h"
#include "architectures/hf_config.h"
#include "checkpoint/random_weights.h"
#include "layers/footprint.h"
#include "layers/parameters.h"

namespace linnet {

RunOptions with_shards(RunOptions options, const Communicator& comm) {
  // Shards defaults to the shard group's size (the ranks of a replica: --tp, else all of
  // them); given, it must be that size. The rule lives here, once, for every command.
  if (options.shards == 0) options.shards = comm.size();
  if (options.shards != comm.size())
    throw Error(str("--shards ", options.shards, " but this replica's shard group has ", comm.size(), " rank(s) (--tp, ",
                    "default: every rank of the job): start ", options.shards, " rank(s) per replica (--tp ",
                    options.shards, "), or leave --shards out"));
  return options;
}

namespace {
// config's generics under `options` (Shards: the group's size unless they say), checked to
// fit the backend's memory.
LoadedModel bound(const ModelConfig& config, RunOptions options, Backend& backend, Communicator& comm,
                  int ranks_sharing, const StagePlace& stage) {
  LoadedModel m;
  m.config = config;
  m.generics = bind_generics(m.config, with_shards(options, comm));
  // Formats the backend has kernels for, sliced on block boundaries: refused before any read.
  check_weight_layouts(parameter_specs(m.config, m.generics), m.generics.shards,
                       [&](WeightFormat f) { return backend.supports(f); }, backend.name());
  check_fits(m.config, m.generics, backend.compute_dtype(m.generics.t), backend.weight_dtype(m.generics.t),
             backend.memory_available(), ranks_sharing,
             options.max_seq == 0, str(backend.name(), " backend"), stage);
  return m;
}
}  // namespace

LoadedModel random_model(const ModelConfig& config, RunOptions options, Backend& backend, Communicator& comm,
                         int ranks_sharing, const StagePlace& stage) {
  if (config.quantization)
    throw Error(str("random weights are dense, but this config has quantization_config (",
                    config.quantization->describe(),
                    "): write a checkpoint with `linnet init` and `linnet quantize`, and run that"));
  LoadedModel m = bound(config, options, backend, comm, ranks_sharing, stage);
  // On a device that can make them, the matrices are made there, in the dtype the model keeps
  // them in (no f32 on the host, no upload); elsewhere on the host as before.
  const bool on_device = backend.device() != Device::cpu && m.generics.t == m.config.dtype &&
                         backend.weight_dtype(m.generics.t) == m.config.dtype;
  RandomWeights weights(0, m.config.dtype, on_device ? &backend : nullptr);
  m.model = std::make_unique<Model>(m.config, m.generics, weights, backend, comm, stage);
  return m;
}

LoadedModel load_model(const std::string& dir, RunOptions options, Backend& backend, Communicator& comm,
                       int ranks_sharing, const StagePlace& stage) {
  const auto started = std::chrono::steady_clock::now();
  const ModelConfig config = load_hf_config(dir);
  CheckpointDir files(dir);
  if (!config.multimodal.empty()) {
    const int64_t aside = files.keep_text_model();
    if (comm.rank() == 0)
      spdlog::info("{}: the {} text model of a {} checkpoint ({} tensor(s) of its vision tower and projector set aside)",
                   dir, config.model_type, config.multimodal, aside);
  }
  // What the config asks for against what the files hold, from their headers, before the
  // memory plan and before anything is read (a folder with no tensors at all gets the memory
  // plan's verdict first, then the first missing tensor's name).
  if (!files.names().empty()) expect_layers(files, config.layers);
  LoadedModel m = bound(config, options, backend, comm, ranks_sharing, stage);
  CheckpointWeights weights(files, m.config.dtype);
  weights.expect_all(parameter_specs(m.config, m.generics));
  m.model = std::make_unique<Model>(m.config, m.generics, weights, backend, comm, stage);
  // Every shard read its own slices: the first rank that found a bad value tells them all.
  if (const std::string bad = first_error(comm, weights.non_finite()); !bad.empty()) throw Error(bad);
  // As vLLM's "Loading weights took …": what a load costs is the first thing a cluster job waits on.
  if (comm.rank() == 0)
    spdlog::info("{}: weights loaded in {:.2f} s", dir,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  m.from_packed_file = weights.used_packed_file();
  if (m.from_packed_file && comm.rank() == 0)
    spdlog::info("{}: matrices mapped from {} (checksums verified in {:.2f} s)", dir, kPackedFileName,
                 weights.packed_verify_seconds());
  auto unused = weights.unused(m.config, parameter_specs(m.config, m.generics));
  // Multi-token-prediction layers (GLM-4.5, DeepSeek-V3: model.layers.<num_hidden_layers + i>.*;
  // Qwen3.5 and Qwen3-Next: a module of its own, mtp.*) are skipped, with one line: speculative
  // decoding would use them.
  {
    auto mtp = [&](const std::string& name) {
      if (name.starts_with("mtp.")) return true;
      for (int64_t i = 0; i < m.config.mtp_layers; ++i)
        if (name.starts_with(str("model.layers.", m.config.layers + i, "."))) return true;
      return false;
    };
    const auto skipped = std::count_if(unused.begin(), unused.end(), mtp);
    if (skipped > 0 && comm.rank() == 0)
      spdlog::info("{}: {} tensor(s) of the multi-token-prediction {} skipped ({}speculative decoding is not implemented)",
                   dir, skipped,
                   m.config.mtp_layers > 0 ? str("layer(s) model.layers.", m.config.layers, ".*") : std::string("module mtp.*"),
                   m.config.mtp_layers > 0 ? str("num_nextn_predict_layers = ", m.config.mtp_layers, "; ") : std::string());
    unused.erase(std::remove_if(unused.begin(), unused.end(), mtp), unused.end());
  }
  if (!unused.empty() && comm.rank() == 0) {
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 6; ++i) list += (i ? ", " : "") + unused[i];
    if (unused.size() > 6) list += str(", … (", unused.size() - 6, " more)");
    spdlog::warn("{}: {} tensor(s) in the checkpoint are not used by the model (num_hidden_layers = {}): {}", dir,
                 unused.size(), m.config.layers, list);
  }
  return m;
}

}  // namespace linnet
