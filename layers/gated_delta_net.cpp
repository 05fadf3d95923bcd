#include "layers/gated_delta_net.h"

namespace linnet {

void GatedDeltaNet::forward(Context& ctx, const Tensor& x, const DevicePlan& plan, LayerCache& state,
                            Tensor& out) const {
  Backend& be = ctx.backend;
  const int64_t n = x.dim(0), values = dims.value_heads * dims.value_dim;
  Tensor qkv = be.empty({n, dims.qkv_width()}, x.dtype());
  Tensor z = be.empty({n, values}, x.dtype());
  Tensor ba = be.empty({n, 2 * dims.value_heads}, x.dtype());
  qkv_proj.forward(ctx, x, qkv);  // column-parallel: this shard's heads
  z_proj.forward(ctx, x, z);
  ba_proj.forward(ctx, x, ba);
  Tensor mixed = be.empty(qkv.shape(), x.dtype());
  be.causal_conv1d(qkv, conv, plan.state_rows, plan.state_keep, state.conv, mixed);
  Tensor core = be.empty({n, values}, x.dtype());
  // positions: the aligned chunks of 64 run by the chunked form (the scheduler cuts prompts there).
  be.gated_delta_rule(mixed, ba, a_log, dt_bias, plan.state_rows, plan.positions, plan.state_keep, dims, state.delta,
                      core);
  Tensor normed = be.empty(core.shape(), x.dtype());
  be.rms_norm_gated(core, z, norm, norm_eps, normed);
  out_proj.forward_partial(ctx, normed, out);
  ctx.comm.all_reduce_sum(out);  // row-parallel out_proj: sum the shards' partial products
}

}  // namespace linnet
