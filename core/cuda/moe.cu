// The CUDA backend's mixture-of-experts kernels (core/backend.h): the router's softmax, torch's
// top-k (core/top_k.h: the same steps as libstdc++ runs them for PyTorch on the CPU, so the
// same experts are chosen, ties included), the grouped expert product, and the weighted sum in
// transformers' order. Compiled in every CUDA build; tests/backend_ops_test.cpp checks them
// against the CPU backend where a GPU is visible (docs/gpu.md).
#include "core/cuda/cuda_common.cuh"
#include "core/cuda/device_blocks.cuh"
#include "core/cuda/kernels.cuh"
#include "core/cuda/quantized_weights.cuh"
#include "core/expert_choice.h"
#include "core/top_k.h"

namespace linnet::cuda {
namespace {

// ---- router_softmax: one warp per row ---------------------------------------------------------
__global__ void router_softmax_kernel(const void* __restrict__ logits, int ldt, float* __restrict__ probs, int64_t N,
                                      int64_t E) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  float mx = -INFINITY;
  for (int64_t i = lane; i < E; i += 32) mx = fmaxf(mx, load_any(logits, ldt, row * E + i));
  mx = warp_max(mx);
  float sum = 0;
  for (int64_t i = lane; i < E; i += 32) {
    const float e = expf(load_any(logits, ldt, row * E + i) - mx);
    probs[row * E + i] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  const float inv = 1.0f / sum;
  for (int64_t i = lane; i < E; i += 32) probs[row * E + i] *= inv;
}

// ---- top_k: one thread per row, the row's (value, index) pairs in local memory ---------------
constexpr int kMaxExperts = 1024;  // checkpoint/hf_config.cpp refuses more

__global__ void top_k_kernel(const float* __restrict__ probs, int64_t N, int64_t E, int64_t k, bool normalize,
                             float* __restrict__ weights, int32_t* __restrict__ experts) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= N) return;
  topk::Entry e[kMaxExperts];
  for (int64_t i = 0; i < E; ++i) e[i] = {probs[row * E + i], static_cast<int32_t>(i)};
  topk::torch_top_k(e, E, k);
  float sum = 0;
  for (int64_t j = 0; j < k; ++j) sum = __fadd_rn(sum, e[j].value);
  for (int64_t j = 0; j < k; ++j) {
    weights[row * k + j] = normalize ? __fdiv_rn(e[j].value, sum) : e[j].value;
    experts[row * k + j] = e[j].index;
  }
}

// ---- choose_experts: one thread per row (core/expert_choice.h), as top_k -------------------
__global__ void choose_experts_kernel(const float* __restrict__ logits, const float* __restrict__ bias, ExpertChoice rule,
                                      int64_t N, int64_t E, int64_t k, float* __restrict__ weights,
                                      int32_t* __restrict__ experts) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= N) return;
  topk::Entry e[kMaxExperts + topk::kMaxExpertGroups];
  float scores[kMaxExperts];
  topk::choose_experts(logits + row * E, bias, rule, E, k, e, scores, weights + row * k, experts + row * k);
}

// ---- grouped_matmul: matmul.cu's SIMT tile (core/cuda/device_blocks.cuh), each row tile ----
// within one group
using namespace tile;

// W: how a weight is read (DenseWeights, QuantizedAt<F>); row0: group 0's first row in w.
template <class W>
__global__ void __launch_bounds__(kThreads)
    grouped_matmul_kernel(const void* __restrict__ x, int xdt, W w, int64_t row0, void* __restrict__ out, int odt,
                          int64_t K, int64_t O, GroupTiles tiles) {
  __shared__ tile::Shared sh;
  // This block's group: the last whose first tile is at or before blockIdx.y.
  int g = 0;
  while (g + 1 < tiles.groups && tiles.first_tile[g + 1] <= static_cast<int>(blockIdx.y)) ++g;
  const int64_t row_end = tiles.offsets[g + 1];
  const int64_t m0 = tiles.offsets[g] + static_cast<int64_t>(blockIdx.y - tiles.first_tile[g]) * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const int64_t wrow = row0 + static_cast<int64_t>(tiles.first_group + g) * O;  // group g's weight rows
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[2][4] = {};
  // The chains matmul's kernel runs: the same for any row count.
  simt_tile(x, xdt, w, m0, row_end, wrow, n0, K, O, sh, acc);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t r = m0 + 2 * ty + i;
    if (r >= row_end) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = n0 + 4 * tx + j;
      if (c < O) store_any(out, odt, r * O + c, acc[i][j]);
    }
  }
}

// ---- moe_combine: one thread per (token, column) ----------------------------------------------
__global__ void moe_combine_kernel(const void* __restrict__ y, int ydt, const int32_t* __restrict__ rows,
                                   const int32_t* __restrict__ experts, const float* __restrict__ weights,
                                   void* __restrict__ out, int odt, int64_t N, int64_t H, int64_t K) {
  const int64_t total = N * H;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = idx / H, c = idx - n * H;
    // The token's choices in increasing expert order (an insertion sort of at most 64).
    int order[64];
    int m = 0;
    for (int64_t j = 0; j < K; ++j) {
      if (rows[n * K + j] < 0) continue;
      int at = m++;
      while (at > 0 && experts[n * K + order[at - 1]] > experts[n * K + j]) order[at] = order[at - 1], --at;
      order[at] = static_cast<int>(j);
    }
    float acc = 0.f;
    for (int i = 0; i < m; ++i) {
      const int64_t j = order[i];
      // The product rounded, then added (no fused multiply-add): index_add_ of (y · w).
      acc = __fadd_rn(acc, __fmul_rn(load_any(y, ydt, static_cast<int64_t>(rows[n * K + j]) * H + c), weights[n * K + j]));
    }
    store_any(out, odt, idx, acc);
  }
}

}  // namespace

void launch_router_softmax(const void* logits, int ldt, float* probs, int64_t N, int64_t E, cudaStream_t s) {
  if (N == 0 || E == 0) return;
  constexpr int kWarps = 8;
  router_softmax_kernel<<<blocks_for(N, kWarps), kWarps * 32, 0, s>>>(logits, ldt, probs, N, E);
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_choose_experts(const float* logits, const float* bias, const ExpertChoice& rule, int64_t N, int64_t E,
                           int64_t k, float* weights, int32_t* experts, cudaStream_t s) {
  if (N == 0) return;
  if (E > kMaxExperts) throw Error(str("cuda choose_experts: ", E, " experts (at most ", kMaxExperts, ")"));
  constexpr int kRows = 64;
  choose_experts_kernel<<<blocks_for(N, kRows), kRows, 0, s>>>(logits, bias, rule, N, E, k, weights, experts);
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_top_k(const float* probs, int64_t N, int64_t E, int64_t k, bool normalize, float* weights, int32_t* experts,
                  cudaStream_t s) {
  if (N == 0) return;
  if (E > kMaxExperts) throw Error(str("cuda top_k: ", E, " experts (at most ", kMaxExperts, ")"));
  constexpr int kRows = 64;
  top_k_kernel<<<blocks_for(N, kRows), kRows, 0, s>>>(probs, N, E, k, normalize, weights, experts);
  LINNET_CUDA_LAUNCH_CHECK();
}

int grouped_matmul_rows_per_tile() { return kBM; }

void launch_grouped_matmul(const void* x, int xdt, const void* w, int wdt, void* out, int odt, int64_t K, int64_t O,
                           const GroupTiles& tiles, int tile_count, cudaStream_t s) {
  if (tile_count == 0 || O == 0) return;
  const dim3 grid(static_cast<unsigned>((O + kBN - 1) / kBN), static_cast<unsigned>(tile_count));
  if (tile_count > 65535) throw Error(str("cuda grouped_matmul: ", tile_count, " row tiles exceed the grid (65535)"));
  grouped_matmul_kernel<<<grid, kThreads, 0, s>>>(x, xdt, DenseWeights{w, wdt, K}, 0, out, odt, K, O, tiles);
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_grouped_matmul_quantized(const void* x, int xdt, const QuantWeights& w, int64_t row0, void* out, int odt,
                                     int64_t K, int64_t O, const GroupTiles& tiles, int tile_count, cudaStream_t s) {
  if (tile_count == 0 || O == 0) return;
  const dim3 grid(static_cast<unsigned>((O + kBN - 1) / kBN), static_cast<unsigned>(tile_count));
  if (tile_count > 65535) throw Error(str("cuda grouped_matmul: ", tile_count, " row tiles exceed the grid (65535)"));
  by_format(w, "grouped_matmul", [&]<int F>() {
    grouped_matmul_kernel<<<grid, kThreads, 0, s>>>(x, xdt, QuantizedAt<F>{w}, row0, out, odt, K, O, tiles);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_moe_combine(const void* y, int ydt, const int32_t* rows, const int32_t* experts, const float* weights,
                        void* out, int odt, int64_t N, int64_t H, int64_t K, cudaStream_t s) {
  if (N * H == 0) return;
  if (K > 64) throw Error(str("cuda moe_combine: ", K, " choices per token (at most 64)"));
  moe_combine_kernel<<<blocks_for(N * H, 256), 256, 0, s>>>(y, ydt, rows, experts, weights, out, odt, N, H, K);
  LINNET_CUDA_LAUNCH_CHECK();
}

}  // namespace linnet::cuda
