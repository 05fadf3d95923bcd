// qwen3_5::GatedDeltaNet<H, LinearKeyHeads, LinearValueHeads, Dk, Dv, K, Batch, T, Shards>: the
// linear attention of Qwen3.5 and Qwen3-Next (transformers' Qwen3_5GatedDeltaNet). Per token:
// q|k|v = in_proj_qkv(x), z = in_proj_z(x), b|a = in_proj_b/a(x); q|k|v through the causal
// depthwise convolution of K taps with SiLU; the gated delta rule over a state per row (q and k
// l2-normed, β = σ(b), decay from A_log, a and dt_bias); the gated RMSNorm per value head with
// silu(z); out_proj. This rank holds LinearKeyHeads/Shards key heads with their value heads,
// conv channels, gates and norm inputs (every projection column-parallel by head), out_proj
// row-parallel (its partial sums all-reduced here). Its state (the conv inputs and the delta
// state of each row) is the network's (layers/kv_cache.h, Kind::recurrent), handed in on each
// call with the plan's state row of every token (DevicePlan::state_rows).
#pragma once
#include "layers/kv_cache.h"
#include "layers/linear.h"
#include "layers/token_plan.h"

namespace linnet {

struct GatedDeltaNet {
  Linear qkv_proj;     // [(2·LinearKeyHeads·Dk + LinearValueHeads·Dv)/Shards, H]: this shard's q | k | v
  Linear z_proj;       // [LinearValueHeads/Shards·Dv, H]
  Linear ba_proj;      // [2·LinearValueHeads/Shards, H]: b, then a
  Tensor conv;         // [C/Shards, K]: each channel's taps, oldest input first
  Tensor a_log, dt_bias;  // [LinearValueHeads/Shards]
  Tensor norm;         // [Dv]: the gated RMSNorm's weight, one for every head
  float norm_eps = 1e-6f;
  Linear out_proj;     // [H, LinearValueHeads/Shards·Dv], row-parallel
  DeltaNetDims dims;   // this shard's heads

  // x: [N, H] normed hidden states of the plan's tokens; out: [N, H]. Each token reads and
  // advances its state row of `state` (conv, delta) in the plan's order.
  void forward(Context& ctx, const Tensor& x, const DevicePlan& plan, LayerCache& state, Tensor& out) const;
};

}  // namespace linnet
