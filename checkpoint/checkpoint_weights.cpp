#include "checkpoint/checkpoint_weights.h"

#include <cstring>

#include "checkpoint/hf_config.h"

namespace linnet {

Tensor CheckpointWeights::read(const ParamSpec& p, int64_t shard) {
  dir_.expect(p.hf_name, p.full);
  const DType stored = dir_.info(p.hf_name).dtype;
  if (!is_float(stored))
    throw Error(str(dir_.file_of(p.hf_name).path(), ": tensor '", p.hf_name, "' has dtype ", dtype_name(stored),
                    ", expected a float dtype (bf16, f16 or f32)"));
  if (stored != declared_)
    throw Error(str(dir_.file_of(p.hf_name).path(), ": tensor '", p.hf_name, "' is stored as ", dtype_name(stored),
                    ", but config.json's torch_dtype says ", dtype_name(declared_)));
  if (p.split == Split::mirrored) return dir_.read(p.hf_name);
  const auto [begin, end] = p.shard_range(shard);
  if (p.split == Split::columns) return dir_.read_cols(p.hf_name, begin, end);
  Tensor rows = dir_.read_rows(p.hf_name, begin, end);
  if (end - begin == p.per_shard) return rows;
  // lm_head's last shard when Vocab does not divide: zero rows pad it to ⌈Vocab/Shards⌉.
  Tensor padded = Tensor::zeros(p.shard_shape(), rows.dtype());
  std::memcpy(padded.data(), rows.data(), rows.nbytes());
  return padded;
}

LoadedModel load_model(const std::string& dir, RunOptions options, Backend& backend, Communicator& comm) {
  LoadedModel m;
  m.config = load_hf_config(dir);
  if (options.shards == 1 && comm.size() > 1) options.shards = comm.size();
  m.generics = bind_generics(m.config, options);
  if (m.generics.shards != comm.size())
    throw Error(str("Shards=", m.generics.shards, " but the shard group has ", comm.size(), " ranks"));
  CheckpointDir files(dir);
  CheckpointWeights weights(files, m.config.dtype);
  m.model = std::make_unique<Model>(m.config, m.generics, weights, backend, comm);
  return m;
}

}  // namespace linnet
