// llama.attention::GroupedQueryAttention<H, Heads, KvHeads, Batch, MaxSeq, T, Shards, PageSize>
// (with D = head_dim where it is not H / Heads). This rank holds Heads/Shards query heads and
// KvHeads/Shards key/value heads: q/k/v_proj are column-parallel (one product over their
// stacked weights), o_proj row-parallel (partial sums all-reduced here). Its state, the
// layer's keys and values, is the network's (layers/kv_cache.h), handed in on each call. The families' differences: q/k norms (per head, or over the whole projection
// with its sum of squares all-reduced here), a RoPE of the layer's kind or none, a sliding
// window, the scores' scale and soft-capping (in `dims`).
// Card notation (H, Heads, KvHeads, D, Batch, MaxSeq, T, Shards, PageSize): the generics table
// of docs/entries.md.
#pragma once
#include <optional>

#include "layers/block_options.h"
#include "layers/kv_cache.h"
#include "layers/linear.h"
#include "layers/rms_norm.h"
#include "layers/token_plan.h"

namespace linnet {

class GroupedQueryAttention {
 public:
  Linear q_proj, k_proj, v_proj;  // views into qkv_proj's rows
  Linear qkv_proj;                // [(Heads + 2·KvHeads)/Shards · D, H] ([(2·Heads + 2·KvHeads)/Shards · D, H] gated)
  // An output gate (Qwen3.5, Qwen3-Next): q_proj's rows are per head [q | gate], and the
  // attention's output is multiplied by sigmoid(gate) before o_proj.
  bool output_gate = false;
  Linear o_proj;                  // [H, Heads/Shards · D]
  AttentionDims dims;             // the backend's geometry, with the options' window, scale and soft-cap
  int rope = 0;                   // the RoPE of DevicePlan::rope_freq this layer uses (-1: none)
  // q/k norms: per head (weights [D]) or over the whole projection (this shard's [Heads/Shards·D]
  // of a norm over Heads·D: its sum of squares is all-reduced).
  QkNorm qk_norm = QkNorm::none;
  std::optional<RmsNorm> q_norm, k_norm;
  int64_t q_norm_width = 0, k_norm_width = 0;  // whole: the norms' full widths (Heads·D, KvHeads·D)
  // whole, with KV heads replicated across shards: whether this shard's k columns count in the
  // all-reduced sum of squares (the first shard of each KV head's copies; the others add 0).
  bool k_squares_counted = true;
  // Attention sinks (gpt-oss): this shard's heads' logits, f32 [Heads/Shards] (undefined: none).
  Tensor sinks;

  // x: [N, H] normed hidden states of the plan's tokens; out: [N, H]. The plan's K/V are
  // written into cache ([Batch, KvHeads/Shards, MaxSeq, D] each) before any token reads it.
  void forward(Context& ctx, const Tensor& x, const DevicePlan& plan, LayerCache& cache, Tensor& out) const;

 private:
  void norm_qk(Context& ctx, Tensor& qkv) const;
};

}  // namespace linnet
