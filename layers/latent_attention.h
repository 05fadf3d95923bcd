// deepseek.attention::LatentAttention<H, Heads, QLora, KvLora, Nope, Rope, V, Batch, MaxSeq, T,
// Shards, PageSize>: multi-head latent attention (DeepSeek V2/V3, Kimi K2, Mistral 4) in its
// absorbed form, for prefill and decode alike. Per token:
//   q      = q_b_proj(q_a_norm(q_a_proj(x)))  (or q_proj(x))   [Heads/Shards, Nope + Rope]
//   latent = kv_a_proj(x) = [c_kv (KvLora) | k_pe (Rope)], c_kv ← kv_a_norm(c_kv)
// and per head h, with kv_b_proj's rows [W_UK_h (Nope) ; W_UV_h (V)] × KvLora:
//   score  = q_nope_h · (W_UK_h c_kv) + q_pe_h · k_pe = [q_pe_h | W_UK_hᵀ q_nope_h] · [k_pe | c_kv]
//   out_h  = W_UV_h Σ p c_kv
// so the attention ops run it as one KV head of Rope + KvLora columns whose keys are the values
// (the cache holds [k_pe | c_kv] once per token and layer, no head dimension: LayerCacheSpec
// latent), q heads [q_pe | q_lat]; W_UK_hᵀ and W_UV_h are per-head products (grouped_matmul
// over head-major rows). q_b_proj is column-parallel by heads, kv_a_proj and its norm are
// replicated (every shard holds the whole latent cache, as vLLM does), o_proj row-parallel.
#pragma once
#include <optional>

#include "layers/kv_cache.h"
#include "layers/linear.h"
#include "layers/rms_norm.h"
#include "layers/token_plan.h"

namespace linnet {

class LatentAttention {
 public:
  std::optional<Linear> q_a_proj;  // [QLora, H] (absent: q_b_proj is q_proj [Heads/Shards·(Nope + Rope), H])
  std::optional<RmsNorm> q_a_norm; // [QLora]
  Linear q_b_proj;                 // [Heads/Shards·(Nope + Rope), QLora]
  Linear kv_a_proj;                // [KvLora + Rope, H], every shard whole
  RmsNorm kv_a_norm;               // [KvLora]
  Tensor w_uk;                     // [Heads/Shards·KvLora, Nope]: each head's W_UKᵀ (kv_b_proj's key rows, transposed)
  Tensor w_uv;                     // [Heads/Shards·V, KvLora]: each head's W_UV (kv_b_proj's value rows)
  Linear o_proj;                   // [H, Heads/Shards·V]
  int64_t nope = 0, rope_dim = 0, kv_lora = 0, v_dim = 0;
  // DeepSeek's rotary columns in interleaved pairs: de-interleaved as they are copied into the
  // heads (transformers' apply_rotary_pos_emb_interleave gives the same halves).
  bool interleaved = false;
  // Mistral 4's llama_4_scaling_beta (0: none): each query × 1 + beta·ln(1 + ⌊pos / period⌋).
  float query_scale_beta = 0;
  int64_t query_scale_period = 0;
  AttentionDims dims;  // q_heads Heads/Shards, one KV head of Rope + KvLora, the scale
  int rope = 0;        // the RoPE of DevicePlan::rope_freq this layer uses

  // x: [N, H] normed hidden states; out: [N, H]. The plan's latents are written into cache
  // (k and v one tensor, [Batch, 1, MaxSeq, Rope + KvLora]) before any token reads it.
  void forward(Context& ctx, const Tensor& x, const DevicePlan& plan, LayerCache& cache, Tensor& out) const;

 private:
  // The rotary columns [begin, begin + Rope) of each of `heads` heads of src (head stride
  // src_stride) into columns [0, Rope) of dst's heads starting at dst_head (stride dims.head_dim).
  void copy_rotary(Backend& be, const Tensor& src, int64_t begin, int64_t src_stride, int64_t heads, Tensor& dst,
                   int64_t dst_head) const;
};

}  // namespace linnet
