// llama.attention::GroupedQueryAttention<H, Heads, KvHeads, Batch, MaxSeq, T, Shards, PageSize>.
// This rank holds Heads/Shards query heads and KvHeads/Shards key/value heads: q/k/v_proj are
// column-parallel (one product over their stacked weights), o_proj row-parallel (partial sums
// all-reduced here). The KV cache is this block's state.
#pragma once
#include "layers/linear.h"
#include "layers/token_plan.h"

namespace linnet {

class GroupedQueryAttention {
 public:
  Linear q_proj, k_proj, v_proj;  // views into qkv_proj's rows
  Linear qkv_proj;                // [(Heads + 2·KvHeads)/Shards · D, H]
  Linear o_proj;                  // [H, Heads/Shards · D]
  Tensor cache_k, cache_v;        // [Batch, KvHeads/Shards, MaxSeq, D]
  AttentionDims dims;
  Tensor inv_freq;                // [D/2] f32, RoPE

  // x: [N, H] normed hidden states of the plan's tokens; out: [N, H].
  void forward(Context& ctx, const Tensor& x, const DevicePlan& plan, Tensor& out) const;
  // cache_k/cache_v are written through kv_write only; these need them mutable.
  Tensor& mutable_cache_k() const { return const_cast<Tensor&>(cache_k); }
  Tensor& mutable_cache_v() const { return const_cast<Tensor&>(cache_v); }
};

}  // namespace linnet
