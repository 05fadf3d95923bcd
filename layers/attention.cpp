#include "layers/attention.h"

namespace linnet {

void GroupedQueryAttention::norm_qk(Context& ctx, Tensor& qkv) const {
  Backend& be = ctx.backend;
  const int64_t n = qkv.dim(0), d = dims.head_dim, qw = dims.q_heads * d, kw = dims.kv_heads * d;
  if (qk_norm == QkNorm::per_head) {
    // Qwen 3, Gemma 3: an RMSNorm over each head's D dims, on this shard's heads alone.
    be.rms_norm_cols(qkv, 0, dims.q_heads, d, q_norm->weight, q_norm->eps, nullptr, 0);
    be.rms_norm_cols(qkv, qw, dims.kv_heads, d, k_norm->weight, k_norm->eps, nullptr, 0);
  } else if (qk_norm == QkNorm::whole) {
    // OLMo 2: one RMSNorm over all Heads·D (KvHeads·D) columns, which the shards split: each
    // sums the squares of its own columns, and one small all-reduce of [2, N] gives the norms'.
    Tensor ss = be.empty({2, n}, DType::f32);
    Tensor ss_q = ss.rows(0, 1).reshape({n}), ss_k = ss.rows(1, 2).reshape({n});
    be.sum_squares(qkv, 0, qw, ss_q);
    be.sum_squares(qkv, qw, kw, ss_k);
    if (!k_squares_counted) be.fill_zero(ss_k);
    ctx.comm.all_reduce_sum(ss);
    be.rms_norm_cols(qkv, 0, 1, qw, q_norm->weight, q_norm->eps, &ss_q, q_norm_width);
    be.rms_norm_cols(qkv, qw, 1, kw, k_norm->weight, k_norm->eps, &ss_k, k_norm_width);
  }
}

void GroupedQueryAttention::forward(Context& ctx, const Tensor& x, const DevicePlan& plan, LayerCache& cache,
                                    Tensor& out) const {
  Backend& be = ctx.backend;
  const int64_t n = x.dim(0);
  Tensor qkv = be.empty({n, dims.qkv_width()}, x.dtype());
  Tensor gate;  // [N, Heads/Shards · D] with an output gate
  const int64_t d = dims.head_dim, qw = dims.q_heads * d;
  if (output_gate) {
    // q_proj's heads are [q | gate]: the queries join k and v in qkv, the gates apart.
    Tensor proj = be.empty({n, dims.qkv_width() + qw}, x.dtype());
    qkv_proj.forward(ctx, x, proj);
    gate = be.empty({n, qw}, x.dtype());
    be.copy_heads(proj, qkv, HeadCopy{.src_stride = 2 * d, .dst_stride = d, .heads = dims.q_heads, .width = d});
    be.copy_heads(proj, gate, HeadCopy{.src_begin = d, .src_stride = 2 * d, .dst_stride = d, .heads = dims.q_heads,
                                       .width = d});
    be.copy_heads(proj, qkv, HeadCopy{.src_begin = 2 * qw, .dst_begin = qw, .width = dims.qkv_width() - qw});
  } else {
    qkv_proj.forward(ctx, x, qkv);  // q_proj | k_proj | v_proj, column-parallel
  }
  norm_qk(ctx, qkv);
  // q heads then k heads are adjacent in the row: one rotation covers both.
  if (rope >= 0)
    be.rope_heads(qkv, 0, dims.q_heads + dims.kv_heads, dims.head_dim, plan.positions,
                  plan.rope_freq[static_cast<size_t>(rope)], plan.rope_scale[static_cast<size_t>(rope)]);
  // Every K/V of the call is written before any token reads the cache (docs/entries.md "The
  // entries").
  if (plan.any_write) be.kv_write(qkv, dims, plan.slots, cache.k, cache.v);
  Tensor attn = be.empty({n, dims.q_heads * dims.head_dim}, x.dtype());
  AttentionDims packed = dims;
  if (sinks.defined()) packed.sinks = &sinks;
  if (plan.any_packed) be.attention_packed(qkv, packed, plan.run_start, attn);
  if (plan.any_cache) {
    AttentionDims d = packed;
    d.span = plan.span;  // splits sized by this call's longest context, not MaxSeq
    d.row_run = plan.row_run;  // prefill chunks: K/V reads shared among a row's tokens
    be.attention_cache(qkv, d, plan.cache_row, plan.positions, plan.table, cache.k, cache.v, attn);
  }
  if (output_gate) be.sigmoid_mul(attn, gate);
  o_proj.forward_partial(ctx, attn, out);
  ctx.comm.all_reduce_sum(out);  // row-parallel o_proj: sum the shards' partial products
}

}  // namespace linnet
