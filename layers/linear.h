// std.nn.linear::Linear<In, Out, T>: y = x·Wᵀ + b. Under tensor parallelism the same block
// is used column-wise (W split by output rows: no collective) or row-wise (W split by input
// columns: the caller all-reduces the partial sums, and only rank 0 adds the bias so it is
// counted once).
//
// A quantized W whose format rounds its input first (compressed-tensors' dynamic activations:
// WeightLayout::activations, carried by the uploaded matrix) has x rounded here, before the
// product. A per-token scale spans the whole row of x: split across shards (row-parallel), the
// row's amax is all-reduced first, so that each shard rounds its columns as the whole row would.
#pragma once
#include "layers/context.h"

namespace linnet {

struct Linear {
  Tensor weight;  // [Out, In]
  Tensor bias;    // [Out], or undefined

  void forward(Context& ctx, const Tensor& x, Tensor& out) const {
    const Tensor in = rounded_input(ctx, x, false);
    ctx.backend.matmul(in, weight, bias.defined() ? &bias : nullptr, out);
  }
  // Row-parallel half: this rank's partial product; the caller all-reduces `out`.
  void forward_partial(Context& ctx, const Tensor& x, Tensor& out) const {
    const bool add_bias = bias.defined() && ctx.comm.rank() == 0;
    const Tensor in = rounded_input(ctx, x, true);
    ctx.backend.matmul(in, weight, add_bias ? &bias : nullptr, out);
  }
  int64_t out_features() const { return weight.dim(0); }

  // x as the weight's format rounds it before the product (x itself when it does not).
  // columns_split: x holds this shard's columns of each row (row-parallel).
  Tensor rounded_input(Context& ctx, const Tensor& x, bool columns_split) const {
    const ActivationRounding r = weight.storage() ? weight.storage()->activations : ActivationRounding{};
    if (!r.any()) return x;
    Backend& be = ctx.backend;
    Tensor out = be.empty(x.shape(), x.dtype());
    if (r.per_token() && columns_split && ctx.comm.size() > 1) {
      Tensor amax = be.empty({x.dim(0)}, DType::f32);
      be.row_amax(x, amax);
      ctx.comm.all_reduce_max(amax);  // the row's amax over every shard's columns
      be.round_activations(x, r, &amax, out);
    } else {
      be.round_activations(x, r, nullptr, out);
    }
    return out;
  }
};

}  // namespace linnet
