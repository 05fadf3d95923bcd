#include "layers/attention.h"

namespace linnet {

void GroupedQueryAttention::forward(Context& ctx, const Tensor& x, const DevicePlan& plan, Tensor& out) const {
  Backend& be = ctx.backend;
  const int64_t n = x.dim(0);
  Tensor qkv = be.empty({n, dims.qkv_width()}, x.dtype());
  qkv_proj.forward(ctx, x, qkv);  // q_proj | k_proj | v_proj, column-parallel
  // q heads then k heads are adjacent in the row: one rotation covers both.
  be.rope(qkv, 0, dims.q_heads + dims.kv_heads, plan.positions, inv_freq);
  // Every K/V of the call is written before any token reads the cache (SPEC §4).
  if (plan.any_write) be.kv_write(qkv, dims, plan.slots, mutable_cache_k(), mutable_cache_v());
  Tensor attn = be.empty({n, dims.q_heads * dims.head_dim}, x.dtype());
  if (plan.any_packed) be.attention_packed(qkv, dims, plan.run_start, attn);
  if (plan.any_cache) {
    AttentionDims d = dims;
    d.span = plan.span;  // splits sized by this call's longest context, not MaxSeq
    d.row_run = plan.row_run;  // prefill chunks: K/V reads shared among a row's tokens
    be.attention_cache(qkv, d, plan.cache_row, plan.positions, plan.table, cache_k, cache_v, attn);
  }
  o_proj.forward_partial(ctx, attn, out);
  ctx.comm.all_reduce_sum(out);  // row-parallel o_proj: sum the shards' partial products
}

}  // namespace linnet
