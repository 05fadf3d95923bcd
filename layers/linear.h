// std.nn.linear::Linear<In, Out, T>: y = x·Wᵀ + b. Under tensor parallelism the same block
// is used column-wise (W split by output rows: no collective) or row-wise (W split by input
// columns: the caller all-reduces the partial sums, and only rank 0 adds the bias so it is
// counted once).
#pragma once
#include "layers/context.h"

namespace linnet {

struct Linear {
  Tensor weight;  // [Out, In]
  Tensor bias;    // [Out], or undefined

  void forward(Context& ctx, const Tensor& x, Tensor& out) const {
    ctx.backend.matmul(x, weight, bias.defined() ? &bias : nullptr, out);
  }
  // Row-parallel half: this rank's partial product; the caller all-reduces `out`.
  void forward_partial(Context& ctx, const Tensor& x, Tensor& out) const {
    const bool add_bias = bias.defined() && ctx.comm.rank() == 0;
    ctx.backend.matmul(x, weight, add_bias ? &bias : nullptr, out);
  }
  int64_t out_features() const { return weight.dim(0); }
};

}  // namespace linnet
