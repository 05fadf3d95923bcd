// Every parameter of the model as one table: its Hugging Face name, its place on the card, its full
// shape and how it is split across shards (docs/entries.md "Weights and shards"). The loader reads
// each rank's slice from it and `linnet inspect` prints per-rank sizes from it.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/shape.h"
#include "core/weight_layout.h"
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
  // How a matrix is stored (core/weight_layout.h): dense unless a format says otherwise.
  WeightLayout layout{};
  // The dtype it is stored in; none: the checkpoint's (config.json's torch_dtype). Companions
  // (scales, zero points, g_idx) carry theirs.
  std::optional<DType> dtype{};
  // A quantized matrix the network holds dequantized, in the weights' dtype (latent attention's
  // kv_b_proj, split into its absorbed per-head blocks): counted so.
  bool held_dequantized = false;
  // A strided part (Qwen3-Next's in_proj_qkvz, grouped per key head as [q | k | v | z]): its rows
  // come in blocks of row_block, block j from stored row row_offset + j·row_stride (0: one
  // contiguous range). Split by rows only, at whole blocks; dense only.
  int64_t row_block = 0, row_stride = 0;
  // A part stored transposed (gpt-oss's bf16 experts: each expert's [in, out] matrix): rows
  // [row_offset, row_offset + full[1]) of the stored 2-D view hold its columns.
  bool transposed = false;

  const Shape& stored_shape() const { return stored.rank() ? stored : full; }
  // The stored rows [begin, end) of its rows [first, last) are: one range, or a strided part's
  // ranges block by block.
  std::vector<std::pair<int64_t, int64_t>> stored_row_ranges(int64_t first, int64_t last) const;

  // Whether shard s holds any of it (every shard but for Split::expert).
  bool held_by(int64_t shard) const { return split != Split::expert || owner == shard; }
  // Shape on a shard that holds it, and the range [begin, end) of the split dimension it reads.
  Shape shard_shape() const;
  std::pair<int64_t, int64_t> shard_range(int64_t shard) const;

  // The companion tensors its layout asks for (none for dense), each a ParamSpec of its own
  // whose split is derived from this one's: a [rows/br, cols/bc] scale is split along the same
  // dimension, per_shard divided by the block, so shard s reads blocks [begin/b, ⌈end/b⌉) of the
  // range shard_range(s) gives the matrix; g_idx ([cols]) follows a column split and is
  // mirrored under a row split. Names: the matrix's + "_scale", "_zero_point", "_g_idx".
  std::vector<ParamSpec> companions() const;
  // The tensor its values are stored in: itself where the format stores them under the
  // matrix's name (FP8), else that name + values_suffix with the packed shape
  // (compressed-tensors' "…weight_packed" [rows, cols/8] int32), split alike.
  ParamSpec values_part() const;
  // Throws unless every shard's slice (and a fused part's rows) falls on block boundaries,
  // naming the tensor, dimension and block size.
  void check_blocks(int64_t shards) const;
};

// Before anything is read: every parameter's format is one `supported` says the backend
// (named `backend`) has kernels for, and every slice falls on block boundaries. The error
// names the tensor and the format.
void check_weight_layouts(const std::vector<ParamSpec>& specs, int64_t shards,
                          const std::function<bool(WeightFormat)>& supported, const std::string& backend);

std::vector<ParamSpec> parameter_specs(const ModelConfig& config, const Generics& g);

}  // namespace linnet
