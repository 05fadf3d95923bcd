#include "layers/latent_attention.h"

namespace linnet {

void LatentAttention::copy_rotary(Backend& be, const Tensor& src, int64_t begin, int64_t src_stride, int64_t heads,
                                  Tensor& dst, int64_t dst_head) const {
  const int64_t d = dims.head_dim;
  if (!interleaved) {
    be.copy_heads(src, dst, HeadCopy{.src_begin = begin, .src_stride = src_stride, .dst_begin = dst_head * d,
                                     .dst_stride = d, .heads = heads, .width = rope_dim});
    return;
  }
  // Pairs (0, 1), (2, 3), …: the even columns to the first half, the odd to the second.
  for (int64_t odd = 0; odd < 2; ++odd)
    be.copy_heads(src, dst, HeadCopy{.src_begin = begin + odd, .src_stride = src_stride, .step = 2,
                                     .dst_begin = dst_head * d + odd * rope_dim / 2, .dst_stride = d,
                                     .heads = heads, .width = rope_dim / 2});
}

void LatentAttention::forward(Context& ctx, const Tensor& x, const DevicePlan& plan, LayerCache& cache,
                              Tensor& out) const {
  Backend& be = ctx.backend;
  const int64_t n = x.dim(0), hs = dims.q_heads, d = dims.head_dim, qk = nope + rope_dim;
  const DType t = x.dtype();
  // q: [N, Heads/Shards·(Nope + Rope)]
  Tensor q = be.empty({n, hs * qk}, t);
  if (q_a_proj) {
    Tensor qa = be.empty({n, q_a_proj->out_features()}, t), qn = be.empty({n, q_a_proj->out_features()}, t);
    q_a_proj->forward(ctx, x, qa);
    q_a_norm->forward(ctx, qa, qn);
    q_b_proj.forward(ctx, qn, q);
  } else {
    q_b_proj.forward(ctx, x, q);
  }
  // The latent [N, KvLora + Rope], c_kv normed in place.
  Tensor kv = be.empty({n, kv_lora + rope_dim}, t);
  kv_a_proj.forward(ctx, x, kv);
  be.rms_norm_cols(kv, 0, 1, kv_lora, kv_a_norm.weight, kv_a_norm.eps, nullptr, 0);

  // The attention ops' row: Heads/Shards q heads [q_pe | q_lat], the key [k_pe | c_kv], the
  // value (the key again, copied after the rotation).
  Tensor qkv = be.empty({n, (hs + 2) * d}, t);
  copy_rotary(be, q, nope, qk, hs, qkv, 0);
  copy_rotary(be, kv, kv_lora, 0, 1, qkv, hs);
  be.copy_heads(kv, qkv, HeadCopy{.dst_begin = hs * d + rope_dim, .width = kv_lora});
  // q_lat_h = W_UK_hᵀ q_nope_h: the heads' q_nope to head-major rows, one product a head.
  std::vector<int64_t> offsets(static_cast<size_t>(hs + 1));
  for (int64_t h = 0; h <= hs; ++h) offsets[static_cast<size_t>(h)] = h * n;
  Tensor q_nope = be.empty({hs * n, nope}, t), q_lat = be.empty({hs * n, kv_lora}, t);
  be.copy_heads(q, q_nope, HeadCopy{.src_stride = qk, .heads = hs, .width = nope, .dst_blocks = true});
  be.grouped_matmul(q_nope, w_uk, offsets, q_lat);
  be.copy_heads(q_lat, qkv, HeadCopy{.dst_begin = rope_dim, .dst_stride = d, .heads = hs, .width = kv_lora,
                                     .src_blocks = true});
  if (rope >= 0)
    be.rope_heads(qkv, 0, hs + 1, d, plan.positions, plan.rope_freq[static_cast<size_t>(rope)],
                  plan.rope_scale[static_cast<size_t>(rope)]);
  be.copy_heads(qkv, qkv, HeadCopy{.src_begin = hs * d, .dst_begin = (hs + 1) * d, .width = d});
  if (query_scale_beta != 0)  // Mistral 4: the whole query (both parts), after RoPE
    be.scale_by_position(qkv, 0, hs * d, plan.positions, query_scale_beta, query_scale_period);

  // The latents written (k and v are one tensor: the same values twice) before any token reads them.
  if (plan.any_write) be.kv_write(qkv, dims, plan.slots, cache.k, cache.v);
  Tensor attn = be.empty({n, hs * d}, t);
  if (plan.any_packed) be.attention_packed(qkv, dims, plan.run_start, attn);
  if (plan.any_cache) {
    AttentionDims a = dims;
    a.span = plan.span;
    a.row_run = plan.row_run;
    be.attention_cache(qkv, a, plan.cache_row, plan.positions, plan.table, cache.k, cache.v, attn);
  }
  // out_h = W_UV_h · (Σ p c_kv): each head's latent columns to head-major rows, one product a
  // head, back to [N, Heads/Shards·V] for o_proj.
  Tensor lat = be.empty({hs * n, kv_lora}, t), v = be.empty({hs * n, v_dim}, t), heads = be.empty({n, hs * v_dim}, t);
  be.copy_heads(attn, lat, HeadCopy{.src_begin = rope_dim, .src_stride = d, .heads = hs, .width = kv_lora,
                                    .dst_blocks = true});
  be.grouped_matmul(lat, w_uv, offsets, v);
  be.copy_heads(v, heads, HeadCopy{.dst_stride = v_dim, .heads = hs, .width = v_dim, .src_blocks = true});
  o_proj.forward_partial(ctx, heads, out);
  ctx.comm.all_reduce_sum(out);  // row-parallel o_proj: sum the shards' partial products
}

}  // namespace linnet
