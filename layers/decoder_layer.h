// llama::DecoderLayer: x += attention(attention_norm(x)); x += mlp(mlp_norm(x)).
#pragma once
#include "layers/attention.h"
#include "layers/rms_norm.h"
#include "layers/swiglu.h"

namespace linnet {

struct DecoderLayer {
  RmsNorm attention_norm;
  GroupedQueryAttention attention;
  RmsNorm mlp_norm;
  SwiGlu mlp;

  // x: the residual stream [N, H], updated in place.
  void forward(Context& ctx, Tensor& x, const DevicePlan& plan) const {
    Backend& be = ctx.backend;
    Tensor h = be.empty(x.shape(), x.dtype());
    Tensor delta = be.empty(x.shape(), x.dtype());
    attention_norm.forward(ctx, x, h);
    attention.forward(ctx, h, plan, delta);
    mlp_norm.add_forward(ctx, x, delta, h);  // x += attention; h = mlp_norm(x)
    mlp.forward(ctx, h, delta);
    be.add(x, delta);
  }
};

}  // namespace linnet
