// Per-row reductions over a vocab shard of logits: the softmax statistics, argmax and
// Gumbel-max sampling (bit-compatible with the CPU: same Philox draw, f32 score, lowest index
// on ties).
#include <climits>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/kernels.cuh"
#include "core/philox.h"

namespace linnet::cuda {
namespace {

constexpr int kThreads = 512;

__global__ void logit_stats_kernel(const void* logits, int dt, int64_t Vs, int64_t valid,
                                   int64_t vocab_offset, const int32_t* targets, float* out_max,
                                   float* out_sumexp, float* out_target) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const int64_t base = n * Vs;
  float m = -INFINITY;
  for (int64_t k = threadIdx.x; k < valid; k += blockDim.x) m = fmaxf(m, load_any(logits, dt, base + k));
  m = block_max(m, scratch);
  float s = 0.f;
  for (int64_t k = threadIdx.x; k < valid; k += blockDim.x) s += expf(load_any(logits, dt, base + k) - m);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    out_max[n] = m;
    out_sumexp[n] = s;
    const int64_t t = static_cast<int64_t>(targets[n]) - vocab_offset;
    out_target[n] = (targets[n] >= 0 && t >= 0 && t < valid) ? load_any(logits, dt, base + t) : 0.f;
  }
}

__device__ __forceinline__ void better(float v, int64_t i, float& bv, int64_t& bi) {
  if (v > bv || (v == bv && i < bi)) {
    bv = v;
    bi = i;
  }
}

__global__ void argmax_kernel(const void* logits, int dt, int64_t Vs, int64_t valid,
                              int64_t vocab_offset, bool gumbel, uint64_t key0, uint64_t key1,
                              int32_t step, float temperature, float* out_value,
                              int32_t* out_index) {
  __shared__ float sv[32];
  __shared__ long long si[32];
  const int64_t n = blockIdx.x;
  const int64_t base = n * Vs;
  float bv = -INFINITY;
  int64_t bi = LLONG_MAX;
  for (int64_t k = threadIdx.x; k < valid; k += blockDim.x) {
    float v = load_any(logits, dt, base + k);
    if (gumbel) {
      const float g = philox::gumbel(key0, key1, static_cast<uint32_t>(vocab_offset + k),
                                     static_cast<uint32_t>(n), static_cast<uint32_t>(step));
      v = __fadd_rn(__fdiv_rn(v, temperature), g);
    }
    better(v, k, bv, bi);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const long long oi = __shfl_xor_sync(0xffffffffu, static_cast<long long>(bi), o);
    better(ov, oi, bv, bi);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    const int nwarps = blockDim.x >> 5;
    bv = lane < nwarps ? sv[lane] : -INFINITY;
    bi = lane < nwarps ? si[lane] : LLONG_MAX;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const long long oi = __shfl_xor_sync(0xffffffffu, static_cast<long long>(bi), o);
      better(ov, oi, bv, bi);
    }
    if (lane == 0) {
      out_value[n] = bv;
      out_index[n] = static_cast<int32_t>(vocab_offset + (bi == LLONG_MAX ? 0 : bi));
    }
  }
}

}  // namespace

void launch_logit_stats(const void* logits, int dt, int64_t N, int64_t Vs, int64_t valid,
                        int64_t vocab_offset, const int32_t* targets, float* max, float* sumexp,
                        float* target_logit, cudaStream_t s) {
  if (N == 0) return;
  logit_stats_kernel<<<static_cast<unsigned>(N), kThreads, 0, s>>>(
      logits, dt, Vs, valid, vocab_offset, targets, max, sumexp, target_logit);
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_argmax(const void* logits, int dt, int64_t N, int64_t Vs, int64_t valid,
                   int64_t vocab_offset, bool gumbel, uint64_t key0, uint64_t key1, int32_t step,
                   float temperature, float* value, int32_t* index, cudaStream_t s) {
  if (N == 0) return;
  argmax_kernel<<<static_cast<unsigned>(N), kThreads, 0, s>>>(
      logits, dt, Vs, valid, vocab_offset, gumbel, key0, key1, step, temperature, value, index);
  LINNET_CUDA_LAUNCH_CHECK();
}

}  // namespace linnet::cuda
