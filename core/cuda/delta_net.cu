// Gated DeltaNet's kernels (core/backend_op_list.h): the causal convolution, the gated delta rule
// and the gated RMSNorm, each walking a row's tokens in order as the CPU does
// (core/cpu/cpu_delta_net.cpp). Plain first versions: a thread per channel (convolution) and per
// state column (delta rule, whose columns are independent given a token's q and k), and a block
// row per state row (grid y): each walks the call's tokens and takes its own row's, in order, so
// the rows of a step (a decode of Batch rows) run side by side and a token's arithmetic is the
// same whatever else is in the call. The chunked form with tensor cores is for later (docs/gpu.md).
#include "core/cuda/cuda_common.cuh"
#include "core/cuda/kernels.cuh"

namespace linnet::cuda {
namespace {

__device__ __forceinline__ float silu_f(float x) { return __fdiv_rn(x, __fadd_rn(1.f, expf(-x))); }
// x as the activation dtype `dt` holds it.
__device__ __forceinline__ float round_to(int dt, float x) {
  return dt == kBF16 ? __bfloat162float(__float2bfloat16_rn(x)) : dt == kF16 ? __half2float(__float2half_rn(x)) : x;
}

// keep (null: none): after token t, keep[t] ≥ 0 receives the row's state (a snapshot).
__global__ void causal_conv1d_kernel(const void* x, int dt, const void* w, int w_dt, const int32_t* rows,
                                     const int32_t* keep, float* state, void* out, int64_t N, int64_t C, int64_t K) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int32_t row = static_cast<int32_t>(blockIdx.y);
  if (c >= C) return;
  const int64_t kept = K - 1;
  for (int64_t t = 0; t < N; ++t) {
    if (rows[t] != row) continue;
    float* s = state + (static_cast<int64_t>(row) * C + c) * kept;  // oldest first
    const float now = load_any(x, dt, t * C + c);
    float acc = 0.f;
    for (int64_t k = 0; k < kept; ++k) acc = fmaf(load_any(w, w_dt, c * K + k), s[k], acc);
    acc = fmaf(load_any(w, w_dt, c * K + kept), now, acc);
    store_any(out, dt, t * C + c, silu_f(acc));
    for (int64_t k = 0; k + 1 < kept; ++k) s[k] = s[k + 1];
    if (kept > 0) s[kept - 1] = now;
    if (keep && keep[t] >= 0) {
      float* snap = state + (static_cast<int64_t>(keep[t]) * C + c) * kept;
      for (int64_t k = 0; k < kept; ++k) snap[k] = s[k];
    }
  }
}

// One block per (value head, state row), one thread per column of its [dk, dv] state.
__global__ void gated_delta_rule_kernel(const void* qkv, int dt, const void* ab, const void* a_log, int alog_dt,
                                        const void* dt_bias, int dtb_dt, const int32_t* rows, const int32_t* keep,
                                        float* state, void* out, int64_t N, int64_t hk, int64_t dk, int64_t hv,
                                        int64_t dv) {
  const int64_t h = blockIdx.x, c = threadIdx.x, j = h / (hv / hk), width = 2 * hk * dk + hv * dv;
  const int32_t row = static_cast<int32_t>(blockIdx.y);
  const float a_h = -expf(load_any(a_log, alog_dt, h)), bias = load_any(dt_bias, dtb_dt, h);
  const float q_scale = rsqrtf(static_cast<float>(dk));
  for (int64_t t = 0; t < N; ++t) {
    if (rows[t] != row) continue;
    const int64_t q0 = t * width + j * dk, k0 = t * width + hk * dk + j * dk;
    float qq = 0.f, kk = 0.f;
    for (int64_t r = 0; r < dk; ++r) {
      const float qv = load_any(qkv, dt, q0 + r), kv = load_any(qkv, dt, k0 + r);
      qq = fmaf(qv, qv, qq);
      kk = fmaf(kv, kv, kk);
    }
    const float q_inv = rsqrtf(qq + 1e-6f) * q_scale, k_inv = rsqrtf(kk + 1e-6f);
    // transformers: beta = sigmoid(b) in the activation dtype; g in f32.
    const float beta = round_to(dt, __fdiv_rn(1.f, __fadd_rn(1.f, expf(-load_any(ab, dt, t * 2 * hv + h)))));
    const float x = load_any(ab, dt, t * 2 * hv + hv + h) + bias;
    const float decay = expf(a_h * (x > 20.f ? x : log1pf(expf(x))));
    if (c >= dv) continue;
    float* s = state + (static_cast<int64_t>(row) * hv + h) * dk * dv + c;  // column c, stride dv
    float mem = 0.f;
    for (int64_t r = 0; r < dk; ++r) {
      s[r * dv] *= decay;
      mem = fmaf(s[r * dv], load_any(qkv, dt, k0 + r) * k_inv, mem);
    }
    const float delta = (load_any(qkv, dt, t * width + 2 * hk * dk + h * dv + c) - mem) * beta;
    float o = 0.f;
    for (int64_t r = 0; r < dk; ++r) {
      s[r * dv] = fmaf(load_any(qkv, dt, k0 + r) * k_inv, delta, s[r * dv]);
      o = fmaf(s[r * dv], load_any(qkv, dt, q0 + r) * q_inv, o);
    }
    store_any(out, dt, t * hv * dv + h * dv + c, o);
    if (keep && keep[t] >= 0) {  // this thread's column of the head's state, as it stands after token t
      float* snap = state + (static_cast<int64_t>(keep[t]) * hv + h) * dk * dv + c;
      for (int64_t r = 0; r < dk; ++r) snap[r * dv] = s[r * dv];
    }
  }
}

// One block per group of W columns.
__global__ void rms_norm_gated_kernel(const void* x, const void* z, int dt, const void* w, int w_dt, float eps,
                                      void* out, int64_t W) {
  __shared__ float scratch[32];
  const int64_t g = blockIdx.x;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < W; i += blockDim.x) {
    const float v = load_any(x, dt, g * W + i);
    ss = fmaf(v, v, ss);
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / static_cast<float>(W) + eps);
  for (int64_t i = threadIdx.x; i < W; i += blockDim.x) {
    // As Qwen3NextRMSNormGated: normed rounded to the dtype, times w rounded, times silu(z) in f32.
    const float normed = round_to(dt, load_any(x, dt, g * W + i) * inv);
    const float weighted = round_to(dt, load_any(w, w_dt, i) * normed);
    store_any(out, dt, g * W + i, weighted * silu_f(load_any(z, dt, g * W + i)));
  }
}

}  // namespace

void launch_causal_conv1d(const void* x, int dt, const void* weight, int w_dt, const int32_t* rows, const int32_t* keep,
                          float* state, void* out, int64_t N, int64_t C, int64_t K, int64_t R, cudaStream_t s) {
  if (N * C == 0) return;
  if (R > 65535) throw Error(str("cuda causal_conv1d: a state of ", R, " rows (at most 65535)"));
  const dim3 grid(blocks_for(C, 128), static_cast<unsigned>(R));
  causal_conv1d_kernel<<<grid, 128, 0, s>>>(x, dt, weight, w_dt, rows, keep, state, out, N, C, K);
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_gated_delta_rule(const void* qkv, int dt, const void* ab, const void* a_log, int alog_dt,
                             const void* dt_bias, int dtb_dt, const int32_t* rows, const int32_t* keep, float* state,
                             void* out, int64_t N, int64_t hk, int64_t dk, int64_t hv, int64_t dv, int64_t R,
                             cudaStream_t s) {
  if (N == 0) return;
  if (dv > 1024) throw Error(str("cuda gated_delta_rule: value heads of ", dv, " columns (at most 1024)"));
  if (R > 65535) throw Error(str("cuda gated_delta_rule: a state of ", R, " rows (at most 65535)"));
  const dim3 grid(static_cast<unsigned>(hv), static_cast<unsigned>(R));
  gated_delta_rule_kernel<<<grid, static_cast<unsigned>(dv), 0, s>>>(
      qkv, dt, ab, a_log, alog_dt, dt_bias, dtb_dt, rows, keep, state, out, N, hk, dk, hv, dv);
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_rms_norm_gated(const void* x, const void* z, int dt, const void* w, int w_dt, float eps, void* out,
                           int64_t groups, int64_t W, cudaStream_t s) {
  if (groups * W == 0) return;
  rms_norm_gated_kernel<<<static_cast<unsigned>(groups), 128, 0, s>>>(x, z, dt, w, w_dt, eps, out, W);
  LINNET_CUDA_LAUNCH_CHECK();
}

}  // namespace linnet::cuda
