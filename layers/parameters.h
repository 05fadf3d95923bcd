// Every parameter of the model as one table: its Hugging Face name, its place on the card, its full
// shape and how it is split across shards (docs/entries.md "Weights and shards"). The loader reads
// each rank's slice from it and `linnet inspect` prints per-rank sizes from it.
#pragma once
#include <string>
#include <vector>

#include "core/shape.h"
#include "layers/generics.h"

namespace linnet {

// ggml's vocabulary: mirrored on every rank, split by output rows (column-parallel linear),
// or split by input columns (row-parallel linear, followed by an all-reduce); or held whole
// by one rank only (an expert's tensors under expert sharding: `owner`).
enum class Split { mirrored, rows, columns, expert };
const char* split_name(Split s);

struct ParamSpec {
  std::string hf_name;    // "model.layers.0.self_attn.q_proj.weight"
  std::string card_name;  // "layers[0].attention.q_proj.weight"
  Shape full;             // as stored in the checkpoint
  Split split = Split::mirrored;
  // For rows/columns: the split dimension's extent on one shard (lm_head: ⌈Vocab/Shards⌉,
  // the last shard's tail padded with zeros).
  int64_t per_shard = 0;
  bool optional_bias = false;
  // A part of a fused tensor (Phi-3's qkv_proj, gate_up_proj): the stored tensor's shape and
  // the row where this part begins; `full` is the part's own shape. Empty: the whole tensor.
  Shape stored;
  int64_t row_offset = 0;
  // Split::expert: the one shard that holds (and reads) this tensor, whole.
  int64_t owner = -1;
  // Split::rows: how many consecutive shards hold the same slice (KV heads replicated when
  // Shards > KvHeads: Generics::kv_replicas); 1 otherwise.
  int64_t replicas = 1;

  const Shape& stored_shape() const { return stored.rank() ? stored : full; }

  // Whether shard s holds any of it (every shard but for Split::expert).
  bool held_by(int64_t shard) const { return split != Split::expert || owner == shard; }
  // Shape on a shard that holds it, and the range [begin, end) of the split dimension it reads.
  Shape shard_shape() const;
  std::pair<int64_t, int64_t> shard_range(int64_t shard) const;
};

std::vector<ParamSpec> parameter_specs(const ModelConfig& config, const Generics& g);

}  // namespace linnet
