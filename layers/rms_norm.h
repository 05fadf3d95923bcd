// std.nn.norm::RmsNorm<H, T>: x / sqrt(mean(x²) + eps) · weight.
#pragma once
#include "layers/context.h"

namespace linnet {

struct RmsNorm {
  Tensor weight;  // [H]
  float eps = 1e-5f;

  void forward(Context& ctx, const Tensor& x, Tensor& out) const { ctx.backend.rms_norm(x, weight, eps, out); }
  // residual += delta, then out = norm(residual): the add between blocks, fused.
  void add_forward(Context& ctx, Tensor& residual, const Tensor& delta, Tensor& out) const {
    ctx.backend.add_rms_norm(residual, delta, weight, eps, out);
  }
};

}  // namespace linnet
