// llama::DecoderLayer: x += attention(attention_norm(x)); x += mlp(mlp_norm(x)).
// The families' variants: norms after the blocks too (Gemma 2/3: post_attention_norm,
// post_mlp_norm) or only after them (OLMo 2: no attention_norm / mlp_norm), and Granite's
// residual multiplier (x += f(x) · m). A sparse layer (Mixtral, Qwen3-MoE, OLMoE) has a
// mixture of experts in place of the MLP; a linear layer (Qwen3.5) Gated DeltaNet in place of
// attention.
#pragma once
#include <optional>

#include "layers/attention.h"
#include "layers/gated_delta_net.h"
#include "layers/latent_attention.h"
#include "layers/rms_norm.h"
#include "layers/sparse_moe.h"
#include "layers/swiglu.h"

namespace linnet {

struct DecoderLayer {
  std::optional<RmsNorm> attention_norm;       // before attention (absent: OLMo 2)
  GroupedQueryAttention attention;
  std::optional<LatentAttention> latent_attention;  // in place of `attention` (DeepSeek V2/V3, Mistral 4)
  std::optional<GatedDeltaNet> linear_attention;    // in place of `attention` (Qwen3.5's linear layers)
  std::optional<RmsNorm> post_attention_norm;  // after attention (Gemma 2/3, OLMo 2)
  std::optional<RmsNorm> mlp_norm;             // before the MLP (absent: OLMo 2)
  SwiGlu mlp;                                  // a dense layer's MLP
  std::optional<SparseMoe> moe;                // a sparse layer's experts (then `mlp` is empty)
  std::optional<RmsNorm> post_mlp_norm;        // after the MLP (Gemma 2/3, OLMo 2)
  float residual_multiplier = 1.0f;            // Granite

  // The attention block: grouped-query, latent or linear attention.
  void attend(Context& ctx, const Tensor& x, const DevicePlan& plan, LayerCache& cache, Tensor& out) const {
    if (linear_attention) linear_attention->forward(ctx, x, plan, cache, out);
    else if (latent_attention) latent_attention->forward(ctx, x, plan, cache, out);
    else attention.forward(ctx, x, plan, cache, out);
  }
  // The MLP block: the dense MLP or the mixture of experts.
  void feed_forward(Context& ctx, const Tensor& x, Tensor& out) const {
    if (moe) moe->forward(ctx, x, out);
    else mlp.forward(ctx, x, out);
  }

  // x: the residual stream [N, H], updated in place; cache: this layer's K/V.
  void forward(Context& ctx, Tensor& x, const DevicePlan& plan, LayerCache& cache) const {
    Backend& be = ctx.backend;
    Tensor h = be.empty(x.shape(), x.dtype());
    Tensor delta = be.empty(x.shape(), x.dtype());
    if (attention_norm && mlp_norm && !post_attention_norm && !post_mlp_norm && residual_multiplier == 1.0f) {
      attention_norm->forward(ctx, x, h);
      attend(ctx, h, plan, cache, delta);
      mlp_norm->add_forward(ctx, x, delta, h);  // x += attention; h = mlp_norm(x)
      feed_forward(ctx, h, delta);
      be.add(x, delta);
      return;
    }
    Tensor* other = &h;  // the buffer not holding the value in hand
    auto the_other = [&](const Tensor* t) { return t == &h ? &delta : &h; };
    // attention
    const Tensor* in = &x;
    if (attention_norm) {
      attention_norm->forward(ctx, x, h);
      in = &h;
    }
    attend(ctx, *in, plan, cache, delta);
    Tensor* r = &delta;
    if (post_attention_norm) {
      post_attention_norm->forward(ctx, delta, h);
      r = &h;
    }
    if (residual_multiplier != 1.0f) be.pointwise(*r, Backend::Pointwise::multiply, residual_multiplier);
    // MLP
    const Tensor* mlp_in = &x;
    if (mlp_norm) {
      other = the_other(r);
      mlp_norm->add_forward(ctx, x, *r, *other);  // x += r; other = mlp_norm(x)
      mlp_in = other;
    } else {
      be.add(x, *r);
    }
    Tensor* o = mlp_in == &h ? &delta : &h;
    feed_forward(ctx, *mlp_in, *o);
    if (post_mlp_norm) {
      Tensor* p = the_other(o);
      post_mlp_norm->forward(ctx, *o, *p);
      o = p;
    }
    if (residual_multiplier != 1.0f) be.pointwise(*o, Backend::Pointwise::multiply, residual_multiplier);
    be.add(x, *o);
  }
};

}  // namespace linnet
