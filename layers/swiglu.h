// std.nn.mlp::SwiGlu<H, Inner / Shards, T>: down(silu(gate(x)) · up(x)); GeGlu (Gemma) the same with
// gelu_tanh for silu.
// gate and up are column-parallel (split by Inner rows) and run as one product over their
// stacked weights; down is row-parallel, so its partial sums are all-reduced here.
#pragma once
#include "layers/block_options.h"
#include "layers/linear.h"

namespace linnet {

struct SwiGlu {
  Linear gate, up;  // views into gate_up's rows
  Linear gate_up;   // [2·Inner/Shards, H]: gate rows, then up rows
  Linear down;      // [H, Inner/Shards]
  MlpOptions options;

  void forward(Context& ctx, const Tensor& x, Tensor& out) const {
    Backend& be = ctx.backend;
    const int64_t n = x.dim(0), inner = gate.out_features();
    Tensor gu = be.empty({n, 2 * inner}, x.dtype());
    gate_up.forward(ctx, x, gu);
    Tensor act = be.empty({n, inner}, x.dtype());
    if (options.activation == MlpActivation::gelu_tanh) be.geglu(gu, act);
    else be.swiglu(gu, act);
    down.forward_partial(ctx, act, out);
    ctx.comm.all_reduce_sum(out);  // row-parallel down: sum the shards' partial products
  }
};

}  // namespace linnet
