// The CUDA backend's matrix product, batch-invariant by construction (docs/numerics.md):
// out[N, O] = x[N, K] · w[O, K]ᵀ (+ bias) with every output element one f32 fused
// multiply-add chain over k = 0 … K−1 in order, whatever N is. One tile shape for every N
// (BM × BN outputs a block, BK of k a step); rows past N are zeros that are never stored; no
// split over k, no library heuristic choosing a kernel by shape. cuBLAS is no longer on the
// model's path: its algorithm (tile, split-K) changes with N, and so did the last bits.
#include "core/cuda/cuda_common.cuh"
#include "core/cuda/device_blocks.cuh"
#include "core/cuda/kernels.cuh"
#include "core/cuda/quantized_weights.cuh"

namespace linnet::cuda {
namespace {

using namespace tile;  // the SIMT tile (core/cuda/device_blocks.cuh), shared with grouped_matmul

// W: how a weight is read (DenseWeights, QuantizedAt<F>); wrow: the first row of w used.
template <class W>
__global__ void __launch_bounds__(kThreads)
    matmul_kernel(const void* __restrict__ x, int xdt, W w, int64_t wrow, const void* __restrict__ bias, int bdt,
                  void* __restrict__ out, int odt, int64_t N, int64_t K, int64_t O) {
  __shared__ tile::Shared sh;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM, n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  float acc[2][4] = {};
  simt_tile(x, xdt, w, m0, N, wrow, n0, K, O, sh, acc);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t r = m0 + 2 * ty + i;
    if (r >= N) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = n0 + 4 * tx + j;
      if (c >= O) continue;
      const float v = bias ? acc[i][j] + load_any(bias, bdt, c) : acc[i][j];
      store_any(out, odt, r * O + c, v);
    }
  }
}

}  // namespace

void launch_matmul(const void* x, int xdt, const void* w, int wdt, const void* bias, int bdt, void* out, int odt,
                   int64_t N, int64_t K, int64_t O, cudaStream_t s) {
  if (N == 0 || O == 0) return;
  const dim3 grid(static_cast<unsigned>((O + kBN - 1) / kBN), static_cast<unsigned>((N + kBM - 1) / kBM));
  if (grid.y > 65535) throw Error(str("cuda matmul: ", N, " rows exceed the grid (", 65535 * kBM, ")"));
  matmul_kernel<<<grid, kThreads, 0, s>>>(x, xdt, DenseWeights{w, wdt, K}, 0, bias, bdt, out, odt, N, K, O);
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_matmul_quantized(const void* x, int xdt, const QuantWeights& w, int64_t row0, const void* bias, int bdt,
                             void* out, int odt, int64_t N, int64_t K, int64_t O, cudaStream_t s) {
  if (N == 0 || O == 0) return;
  const dim3 grid(static_cast<unsigned>((O + kBN - 1) / kBN), static_cast<unsigned>((N + kBM - 1) / kBM));
  if (grid.y > 65535) throw Error(str("cuda matmul: ", N, " rows exceed the grid (", 65535 * kBM, ")"));
  by_format(w, "matmul", [&]<int F>() {
    matmul_kernel<<<grid, kThreads, 0, s>>>(x, xdt, QuantizedAt<F>{w}, row0, bias, bdt, out, odt, N, K, O);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

}  // namespace linnet::cuda
