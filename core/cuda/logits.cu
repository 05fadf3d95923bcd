// Per-row reductions over a vocab shard of logits: the softmax statistics, argmax and
// Gumbel-max sampling (bit-compatible with the CPU: same Philox draw, f32 score, lowest index
// on ties). Two forms (LINNET_CUDA_ROWS): one block a row (block, as before), or the row's
// valid columns in row_segments(valid) pieces of one block each and a kernel that combines
// the pieces in order (split, the default: a decode step's one row of 128K logits takes 32
// blocks, not one). The pieces depend on `valid` only, never on the rows in the call.
#include <climits>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/device_blocks.cuh"
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

__global__ void argmax_kernel(const void* logits, int dt, int64_t Vs, int64_t valid,
                              int64_t vocab_offset, bool gumbel, uint64_t key0, uint64_t key1,
                              int32_t step, float temperature, float* out_value,
                              int32_t* out_index) {
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
  if (block_best(bv, bi)) {
    out_value[n] = bv;
    out_index[n] = static_cast<int32_t>(vocab_offset + (bi == LLONG_MAX ? 0 : bi));
  }
}

// ---- split rows ------------------------------------------------------------------------------
constexpr int kSplitThreads = 256;
constexpr int64_t kSegment = 4096;  // columns a block
constexpr int kMaxSegments = 64;

__host__ __device__ inline int segments_for(int64_t valid) {
  const int64_t s = (valid + kSegment - 1) / kSegment;
  return static_cast<int>(s < 1 ? 1 : s > kMaxSegments ? kMaxSegments : s);
}

// Block b = n·S + piece: row n's columns [piece·L, min(valid, (piece + 1)·L)), L = ⌈valid/S⌉.
__device__ __forceinline__ void segment_of(int64_t valid, int S, int64_t& n, int64_t& begin, int64_t& end) {
  n = blockIdx.x / S;
  const int piece = static_cast<int>(blockIdx.x % S);
  const int64_t L = (valid + S - 1) / S;
  begin = piece * L;
  end = begin + L < valid ? begin + L : valid;
}

// Per piece: its max and Σ exp(logit − max) (0 where the piece holds no finite max).
__global__ void logit_stats_split_kernel(const void* logits, int dt, int64_t Vs, int64_t valid, int S,
                                         float* part_max, float* part_sum) {
  __shared__ float scratch[32];
  int64_t n, begin, end;
  segment_of(valid, S, n, begin, end);
  const int64_t base = n * Vs;
  float m = -INFINITY;
  bool nan_seen = false;  // fmaxf drops NaN: a piece of NaN alone would read as empty
  for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
    const float v = load_any(logits, dt, base + k);
    nan_seen |= isnan(v);
    m = fmaxf(m, v);
  }
  m = block_max(m, scratch);
  const bool any_nan = __syncthreads_or(nan_seen);
  float s = 0.f;
  if (m != -INFINITY)
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) s += expf(load_any(logits, dt, base + k) - m);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    part_max[blockIdx.x] = m;
    part_sum[blockIdx.x] = any_nan ? NAN : s;  // a NaN logit makes the row's sum NaN, as the reference's
  }
}

// One thread a row: M = the pieces' max; Σ_pieces e^{m_p − M}·s_p in piece order.
__global__ void logit_stats_combine_kernel(const void* logits, int dt, int64_t N, int64_t Vs, int64_t valid,
                                           int64_t vocab_offset, const int32_t* targets, int S,
                                           const float* part_max, const float* part_sum, float* out_max,
                                           float* out_sumexp, float* out_target) {
  const int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  float M = -INFINITY;
  for (int p = 0; p < S; ++p) M = fmaxf(M, part_max[n * S + p]);
  float L = 0.f;
  for (int p = 0; p < S; ++p) {
    const float mp = part_max[n * S + p];
    if (mp == -INFINITY) {
      if (isnan(part_sum[n * S + p])) L = NAN;  // a piece of NaN alone
      continue;
    }
    L += expf(mp - M) * part_sum[n * S + p];
  }
  out_max[n] = M;
  out_sumexp[n] = L;
  const int64_t t = static_cast<int64_t>(targets[n]) - vocab_offset;
  out_target[n] = (targets[n] >= 0 && t >= 0 && t < valid) ? load_any(logits, dt, n * Vs + t) : 0.f;
}

// Per piece: its best (value, index within the row), lowest index on ties; index INT_MAX
// where the piece is empty.
__global__ void argmax_split_kernel(const void* logits, int dt, int64_t Vs, int64_t valid, int S,
                                    int64_t vocab_offset, bool gumbel, uint64_t key0, uint64_t key1, int32_t step,
                                    float temperature, float* part_value, int32_t* part_index) {
  int64_t n, begin, end;
  segment_of(valid, S, n, begin, end);
  const int64_t base = n * Vs;
  float bv = -INFINITY;
  int64_t bi = LLONG_MAX;
  for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
    float v = load_any(logits, dt, base + k);
    if (gumbel) {
      const float g = philox::gumbel(key0, key1, static_cast<uint32_t>(vocab_offset + k),
                                     static_cast<uint32_t>(n), static_cast<uint32_t>(step));
      v = __fadd_rn(__fdiv_rn(v, temperature), g);
    }
    better(v, k, bv, bi);
  }
  if (block_best(bv, bi)) {
    part_value[blockIdx.x] = bv;
    part_index[blockIdx.x] = bi == LLONG_MAX ? INT_MAX : static_cast<int32_t>(bi);
  }
}

// One thread a row: the pieces' best by the same rule — the one-block kernel's answer.
__global__ void argmax_combine_kernel(int64_t N, int S, int64_t vocab_offset, const float* part_value,
                                      const int32_t* part_index, float* out_value, int32_t* out_index) {
  const int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  float bv = -INFINITY;
  int64_t bi = LLONG_MAX;
  for (int p = 0; p < S; ++p) {
    const int32_t i = part_index[n * S + p];
    if (i == INT_MAX) continue;
    better(part_value[n * S + p], i, bv, bi);
  }
  out_value[n] = bv;
  out_index[n] = static_cast<int32_t>(vocab_offset + (bi == LLONG_MAX ? 0 : bi));
}

}  // namespace

int row_segments(int64_t valid) { return segments_for(valid); }

int64_t row_workspace(int64_t N, int64_t valid) { return 2 * N * segments_for(valid); }

void launch_logit_stats(const void* logits, int dt, int64_t N, int64_t Vs, int64_t valid,
                        int64_t vocab_offset, const int32_t* targets, float* max, float* sumexp,
                        float* target_logit, bool split, float* workspace, cudaStream_t s) {
  if (N == 0) return;
  if (split) {
    const int S = segments_for(valid);
    float* part_max = workspace;
    float* part_sum = workspace + N * S;
    logit_stats_split_kernel<<<static_cast<unsigned>(N * S), kSplitThreads, 0, s>>>(logits, dt, Vs, valid, S,
                                                                                     part_max, part_sum);
    LINNET_CUDA_LAUNCH_CHECK();
    logit_stats_combine_kernel<<<static_cast<unsigned>((N + 127) / 128), 128, 0, s>>>(
        logits, dt, N, Vs, valid, vocab_offset, targets, S, part_max, part_sum, max, sumexp, target_logit);
    LINNET_CUDA_LAUNCH_CHECK();
    return;
  }
  logit_stats_kernel<<<static_cast<unsigned>(N), kThreads, 0, s>>>(
      logits, dt, Vs, valid, vocab_offset, targets, max, sumexp, target_logit);
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_argmax(const void* logits, int dt, int64_t N, int64_t Vs, int64_t valid,
                   int64_t vocab_offset, bool gumbel, uint64_t key0, uint64_t key1, int32_t step,
                   float temperature, float* value, int32_t* index, bool split, float* workspace,
                   cudaStream_t s) {
  if (N == 0) return;
  if (split) {
    const int S = segments_for(valid);
    float* part_value = workspace;
    auto* part_index = reinterpret_cast<int32_t*>(workspace + N * S);
    argmax_split_kernel<<<static_cast<unsigned>(N * S), kSplitThreads, 0, s>>>(
        logits, dt, Vs, valid, S, vocab_offset, gumbel, key0, key1, step, temperature, part_value, part_index);
    LINNET_CUDA_LAUNCH_CHECK();
    argmax_combine_kernel<<<static_cast<unsigned>((N + 127) / 128), 128, 0, s>>>(N, S, vocab_offset, part_value,
                                                                                 part_index, value, index);
    LINNET_CUDA_LAUNCH_CHECK();
    return;
  }
  argmax_kernel<<<static_cast<unsigned>(N), kThreads, 0, s>>>(
      logits, dt, Vs, valid, vocab_offset, gumbel, key0, key1, step, temperature, value, index);
  LINNET_CUDA_LAUNCH_CHECK();
}

}  // namespace linnet::cuda
