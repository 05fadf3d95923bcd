#include "checkpoint/checkpoint_weights.h"

#include <cstring>

#include "checkpoint/hf_config.h"
#include "checkpoint/random_weights.h"
#include "layers/footprint.h"

#include <spdlog/spdlog.h>

namespace linnet {

Tensor CheckpointWeights::read(const ParamSpec& p, int64_t shard) {
  used_.insert(p.hf_name);
  dir_.expect(p.hf_name, p.full);
  const DType stored = dir_.info(p.hf_name).dtype;
  if (!is_float(stored))
    throw Error(str(dir_.file_of(p.hf_name).path(), ": tensor '", p.hf_name, "' has dtype ", dtype_name(stored),
                    ", expected a float dtype (bf16, f16 or f32)"));
  if (stored != declared_)
    throw Error(str(dir_.file_of(p.hf_name).path(), ": tensor '", p.hf_name, "' is stored as ", dtype_name(stored),
                    ", but config.json's torch_dtype says ", dtype_name(declared_)));
  const auto [begin, end] = p.shard_range(shard);
  // A whole matrix: a view of the mapped file, no copy (the backend lays it out in its own
  // memory and gives the file's pages back as it goes: Tensor::drop_pages). A slice: only its
  // bytes are read. Vectors are copied, as a backend may hold them as they come.
  const bool whole = p.split == Split::mirrored || (p.split == Split::rows && begin == 0 && end == p.full[0] && end == p.per_shard);
  if (whole && p.full.rank() == 2) return dir_.view(p.hf_name);
  if (p.split == Split::mirrored) return dir_.read(p.hf_name);
  if (p.split == Split::columns) return dir_.read_cols(p.hf_name, begin, end);
  Tensor rows = dir_.read_rows(p.hf_name, begin, end);
  if (end - begin == p.per_shard) return rows;
  // lm_head's last shard when Vocab does not divide: zero rows pad it to ⌈Vocab/Shards⌉.
  Tensor padded = Tensor::zeros(p.shard_shape(), rows.dtype());
  std::memcpy(padded.data(), rows.data(), rows.nbytes());
  return padded;
}

std::vector<std::string> CheckpointWeights::unused(const ModelConfig& config) const {
  std::vector<std::string> out;
  if (packed_.used()) return out;  // the matrices came from the packed file, made from these
  for (const std::string& name : dir_.names()) {
    if (used_.count(name)) continue;
    // Buffers older exports carry and transformers ignores too; a tied lm_head.weight copy.
    if (name.ends_with("rotary_emb.inv_freq")) continue;
    if (name == "lm_head.weight" && config.tie_word_embeddings) continue;
    out.push_back(name);
  }
  return out;
}

namespace {
// config's generics under `options` (Shards: the group's size unless they say), checked to
// fit the backend's memory.
LoadedModel bound(const ModelConfig& config, RunOptions options, Backend& backend, Communicator& comm,
                  int ranks_sharing) {
  LoadedModel m;
  m.config = config;
  if (options.shards == 1 && comm.size() > 1) options.shards = comm.size();
  m.generics = bind_generics(m.config, options);
  if (m.generics.shards != comm.size())
    throw Error(str("Shards=", m.generics.shards, " but the shard group has ", comm.size(), " ranks"));
  check_fits(m.config, m.generics, backend.compute_dtype(m.generics.t), backend.weight_dtype(m.generics.t),
             backend.memory_available(), ranks_sharing,
             options.max_seq == 0, str(backend.name(), " backend"));
  return m;
}
}  // namespace

LoadedModel random_model(const ModelConfig& config, RunOptions options, Backend& backend, Communicator& comm,
                         int ranks_sharing) {
  LoadedModel m = bound(config, options, backend, comm, ranks_sharing);
  RandomWeights weights(0, m.config.dtype);
  m.model = std::make_unique<Model>(m.config, m.generics, weights, backend, comm);
  return m;
}

LoadedModel load_model(const std::string& dir, RunOptions options, Backend& backend, Communicator& comm,
                       int ranks_sharing) {
  LoadedModel m = bound(load_hf_config(dir), options, backend, comm, ranks_sharing);
  CheckpointDir files(dir);
  CheckpointWeights weights(files, m.config.dtype);
  m.model = std::make_unique<Model>(m.config, m.generics, weights, backend, comm);
  m.from_packed_file = weights.used_packed_file();
  if (m.from_packed_file && comm.rank() == 0) spdlog::info("{}: matrices mapped from {}", dir, kPackedFileName);
  if (const auto unused = weights.unused(m.config); !unused.empty() && comm.rank() == 0) {
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 6; ++i) list += (i ? ", " : "") + unused[i];
    if (unused.size() > 6) list += str(", … (", unused.size() - 6, " more)");
    spdlog::warn("{}: {} tensor(s) in the checkpoint are not used by the model (num_hidden_layers = {}): {}", dir,
                 unused.size(), m.config.layers, list);
  }
  return m;
}

}  // namespace linnet
