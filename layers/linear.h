// std.nn.linear::Linear<In, Out, T>: y = x·Wᵀ + b. Under tensor parallelism the same block
// is used column-wise (W split by output rows: no collective) or row-wise (W split by input
// columns: the caller all-reduces the partial sums, and only rank 0 adds the bias so it is
// counted once).
//
// A quantized W whose format rounds its input first (compressed-tensors' dynamic activations:
// WeightLayout::activations, carried by the uploaded matrix) takes the product with its input
// so rounded (matmul_rounded: a device may multiply the rounded codes themselves). A per-token
// scale spans the whole row of x: split across shards (row-parallel), the row's amax is
// all-reduced first, so that each shard rounds its columns as the whole row would.
#pragma once
#include "layers/context.h"

namespace linnet {

struct Linear {
  Tensor weight;  // [Out, In]
  Tensor bias;    // [Out], or undefined

  void forward(Context& ctx, const Tensor& x, Tensor& out) const {
    product(ctx, x, false, bias.defined() ? &bias : nullptr, out);
  }
  // Row-parallel half: this rank's partial product; the caller all-reduces `out`.
  void forward_partial(Context& ctx, const Tensor& x, Tensor& out) const {
    const bool add_bias = bias.defined() && ctx.comm.rank() == 0;
    product(ctx, x, true, add_bias ? &bias : nullptr, out);
  }
  int64_t out_features() const { return weight.dim(0); }

  // x as the weight's format rounds it before the product (x itself when it does not), for
  // the experts' grouped product. columns_split: x holds this shard's columns of each row
  // (row-parallel).
  Tensor rounded_input(Context& ctx, const Tensor& x, bool columns_split) const {
    const ActivationRounding r = rounding();
    if (!r.any()) return x;
    Tensor out = ctx.backend.empty(x.shape(), x.dtype());
    const Tensor amax = whole_row_amax(ctx, x, columns_split);
    ctx.backend.round_activations(x, r, amax.defined() ? &amax : nullptr, out);
    return out;
  }

 private:
  ActivationRounding rounding() const { return weight.storage() ? weight.storage()->activations : ActivationRounding{}; }

  void product(Context& ctx, const Tensor& x, bool columns_split, const Tensor* b, Tensor& out) const {
    const ActivationRounding r = rounding();
    if (!r.any()) return ctx.backend.matmul(x, weight, b, out);
    const Tensor amax = whole_row_amax(ctx, x, columns_split);
    ctx.backend.matmul_rounded(x, r, amax.defined() ? &amax : nullptr, weight, b, out);
  }

  // A per-token scale's amax over the whole row where the row is split across shards (each
  // rank's columns' amax, all-reduced); undefined where each rank's rows are whole.
  Tensor whole_row_amax(Context& ctx, const Tensor& x, bool columns_split) const {
    if (!(rounding().per_token() && columns_split && ctx.comm.size() > 1)) return Tensor();
    Tensor amax = ctx.backend.empty({x.dim(0)}, DType::f32);
    ctx.backend.row_amax(x, amax);
    ctx.comm.all_reduce_max(amax);  // the row's amax over every shard's columns
    return amax;
  }
};

}  // namespace linnet
