#include "checkpoint/checkpoint_weights.h"

#include <cmath>
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
  Tensor t = whole && p.full.rank() == 2        ? dir_.view(p.hf_name)
             : p.split == Split::mirrored       ? dir_.read(p.hf_name)
             : p.split == Split::columns        ? dir_.read_cols(p.hf_name, begin, end)
                                                : dir_.read_rows(p.hf_name, begin, end);
  check_finite(p, t, p.split == Split::columns ? 0 : begin, p.split == Split::columns ? begin : 0);
  if (whole || p.split == Split::columns) return t;
  Tensor rows = std::move(t);
  if (end - begin == p.per_shard) return rows;
  // lm_head's last shard when Vocab does not divide: zero rows pad it to ⌈Vocab/Shards⌉.
  Tensor padded = Tensor::zeros(p.shard_shape(), rows.dtype());
  std::memcpy(padded.data(), rows.data(), rows.nbytes());
  return padded;
}

// transformers would turn a NaN or Inf weight into NaN logits; linnet refuses the checkpoint,
// naming the element. The first one found is kept (the load goes on, so that every rank of a
// shard group reaches load_model's agreement instead of some waiting in a collective).
void CheckpointWeights::check_finite(const ParamSpec& p, const Tensor& t, int64_t row0, int64_t col0) {
  if (!non_finite_.empty()) return;
  const int64_t i = first_non_finite(t.data(), t.dtype(), t.numel());
  if (i < 0) return;
  const float value = t.reshape({t.numel()}).rows(i, i + 1).to_floats()[0];
  std::string where;
  if (t.rank() == 2) {
    const int64_t r = row0 + i / t.dim(1), c = col0 + i % t.dim(1);
    where = str("[", r, ", ", c, "] (flat index ", r * p.full[1] + c, ")");
  } else {
    where = str("[", row0 + i, "]");
  }
  non_finite_ = str(dir_.file_of(p.hf_name).path(), ": tensor '", p.hf_name, "' holds ",
                    std::isnan(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf", " at ", where,
                    "; a checkpoint with non-finite weights computes NaN (transformers gives NaN logits) and is "
                    "refused");
}

std::vector<std::string> CheckpointWeights::unused(const ModelConfig& config) const {
  std::vector<std::string> out;
  if (packed_.used()) return out;  // matrices came from the packed file, made from these
  for (const std::string& name : dir_.names()) {
    if (used_.count(name)) continue;
    // Buffers older exports carry and transformers ignores too; a tied lm_head.weight copy.
    if (name.ends_with("rotary_emb.inv_freq")) continue;
    if (name == "lm_head.weight" && config.tie_word_embeddings) continue;
    out.push_back(name);
  }
  return out;
}

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
                  int ranks_sharing) {
  LoadedModel m;
  m.config = config;
  m.generics = bind_generics(m.config, with_shards(options, comm));
  check_fits(m.config, m.generics, backend.compute_dtype(m.generics.t), backend.weight_dtype(m.generics.t),
             backend.memory_available(), ranks_sharing,
             options.max_seq == 0, str(backend.name(), " backend"));
  return m;
}
}  // namespace

LoadedModel random_model(const ModelConfig& config, RunOptions options, Backend& backend, Communicator& comm,
                         int ranks_sharing) {
  LoadedModel m = bound(config, options, backend, comm, ranks_sharing);
  // On a device that can make them, the matrices are made there, in the dtype the model keeps
  // them in (no f32 on the host, no upload); elsewhere on the host as before.
  const bool on_device = backend.device() != Device::cpu && m.generics.t == m.config.dtype &&
                         backend.weight_dtype(m.generics.t) == m.config.dtype;
  RandomWeights weights(0, m.config.dtype, on_device ? &backend : nullptr);
  m.model = std::make_unique<Model>(m.config, m.generics, weights, backend, comm);
  return m;
}

LoadedModel load_model(const std::string& dir, RunOptions options, Backend& backend, Communicator& comm,
                       int ranks_sharing) {
  LoadedModel m = bound(load_hf_config(dir), options, backend, comm, ranks_sharing);
  CheckpointDir files(dir);
  CheckpointWeights weights(files, m.config.dtype);
  m.model = std::make_unique<Model>(m.config, m.generics, weights, backend, comm);
  // Every shard read its own slices: the first rank that found a bad value tells them all.
  if (const std::string bad = first_error(comm, weights.non_finite()); !bad.empty()) throw Error(bad);
  m.from_packed_file = weights.used_packed_file();
  if (m.from_packed_file && comm.rank() == 0)
    spdlog::info("{}: matrices mapped from {} (checksums verified in {:.2f} s)", dir, kPackedFileName,
                 weights.packed_verify_seconds());
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
