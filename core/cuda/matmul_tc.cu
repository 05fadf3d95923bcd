// The tensor-core matrix product, for x and w of one 16-bit dtype (bf16 or f16), still batch
// invariant (docs/numerics.md). Each output element is (((c0 + c1) + c2) + …) + c_{C−1} + bias,
// where chain c_q is a run of 16×16×16 mma steps (f32 accumulators, WMMA) over its fixed range
// [b_q, b_q+1) of k in order, started from zero; the ranges depend on K alone. An mma's
// element (i, j) depends only on row i of its A, column j of its B and its own accumulator,
// so any tiling of rows and columns gives the same bits as long as each element's chains run
// the same mma steps in the same order and are summed in the same order. Two families:
//
// current (LINNET_CUDA_MATMUL=auto, the default): C = 8 chains.
//   split-K (N ≤ kNarrowRows): a block is 16·RT rows (RT = 1, 2 or 4 by N) × 64 columns × one chain; its weight
//           tiles stream through a 4-stage cp.async pipeline (three stages of loads in
//           flight); each chain's f32 partial goes to a workspace and a second kernel adds the
//           C partials in chain order (+ bias). A decode step gets C × O/64 blocks (768 for
//           Llama-3-8B's q|k|v, 512 for down) of short chains: enough loads in flight to
//           stream the weights at the memory's rate;
//   wide:   64 × 64 a block, four warps of 32 × 32, the chains one after another in each warp
//           (prefill: each weight tile loaded once per 64 rows), the sum kept in registers.
// earlier (LINNET_CUDA_MATMUL=tc4): C = 4 chains, a narrow kernel of 16 × 16 blocks whose four
//   warps run the four chains side by side (N ≤ 64), and the same wide kernel with C = 4.
// Within a family the two kernels give the same bits for any N (batch invariance across the
// edge); between families the bits differ (another association of the sum), within bf16's bound.
// The wide kernel walks its tiles row panel first (LINNET_CUDA_RASTER=panel, the default):
// consecutive blocks are the row tiles of one 64-column weight panel, so the panel is read from
// DRAM once and reused from L2 by every row tile, where the column-first order (=columns, as
// before) streamed the whole weight matrix again for every 64 rows. The order changes no bit.
// Rows past N and k past K are zeros that are loaded as zeros and never stored.
#include "core/cuda/matmul_tc.cuh"

namespace linnet::cuda {
namespace tc {
namespace {

// ---- narrow: 16 × 16 outputs a block; warp q runs chain q -------------------------------------
constexpr int kNKS = 128, kNLD = kNKS + 8;  // k a step; row stride in shared memory (16-byte pad)

template <class T>
__global__ void __launch_bounds__(32 * kChains)
    matmul_tc_narrow(const T* __restrict__ x, const T* __restrict__ w, const void* __restrict__ bias, int bdt,
                     void* __restrict__ out, int odt, int64_t N, int64_t K, int64_t O, bool vec) {
  __shared__ __align__(128) T xs[kChains][16 * kNLD];
  __shared__ __align__(128) T ws[kChains][16 * kNLD];
  __shared__ __align__(128) float cs[kChains][16 * 20];
  const int q = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Row tiles are the fast grid index: the few row tiles of one column tile run together
  // and share its weights through L2.
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * 16, n0 = static_cast<int64_t>(blockIdx.y) * 16;
  const int64_t kb = chain_begin<kChains>(K, q), ke = chain_begin<kChains>(K, q + 1);
  FragC acc;
  wmma::fill_fragment(acc, 0.f);
  auto multiply = [&](int64_t k0) {  // the staged step's mma steps, up to the chain's end
    for (int kk = 0; kk < kNKS && k0 + kk < ke; kk += 16) {
      FragA<T> a;
      FragB<T> b;
      wmma::load_matrix_sync(a, xs[q] + kk, kNLD);
      wmma::load_matrix_sync(b, ws[q] + kk, kNLD);
      wmma::mma_sync(acc, a, b, acc);
    }
  };
  if (vec) {
    VectorTile<T, 16, kNKS, kNLD, 32> xt, wt;
    if (kb < ke) {
      xt.fetch(x, m0, N, kb, K, lane);
      wt.fetch(w, n0, O, kb, K, lane);
    }
    for (int64_t k0 = kb; k0 < ke; k0 += kNKS) {
      xt.put(xs[q], lane);
      wt.put(ws[q], lane);
      __syncwarp();
      if (k0 + kNKS < ke) {  // the next step's loads fly while this one multiplies
        xt.fetch(x, m0, N, k0 + kNKS, K, lane);
        wt.fetch(w, n0, O, k0 + kNKS, K, lane);
      }
      multiply(k0);
      __syncwarp();
    }
  } else {
    for (int64_t k0 = kb; k0 < ke; k0 += kNKS) {
      load_tile_by_element<T, 16, kNKS, kNLD, 32>(xs[q], x, m0, N, k0, K, lane);
      load_tile_by_element<T, 16, kNKS, kNLD, 32>(ws[q], w, n0, O, k0, K, lane);
      __syncwarp();
      multiply(k0);
      __syncwarp();
    }
  }
  wmma::store_matrix_sync(cs[q], acc, 20, wmma::mem_row_major);
  __syncthreads();
  for (int e = threadIdx.x; e < 256; e += 32 * kChains) {
    const int r = e / 16, c = e % 16;
    const int64_t gr = m0 + r, gc = n0 + c;
    if (gr >= N || gc >= O) continue;
    float s = cs[0][r * 20 + c];
#pragma unroll
    for (int j = 1; j < kChains; ++j) s = s + cs[j][r * 20 + c];
    store_out(s, bias, bdt, out, odt, gr, gc, O);
  }
}

// out[r][c] = ((part[0][r][c] + part[1][r][c]) + …) + part[C−1][r][c] (+ bias[c]): the order the
// wide kernel adds its chains in.
__global__ void matmul_tc_chain_sum(const float* __restrict__ part, int chains, const void* __restrict__ bias, int bdt,
                                    void* __restrict__ out, int odt, int64_t N, int64_t O) {
  const int64_t total = N * O;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = part[i];
    for (int q = 1; q < chains; ++q) s = s + part[q * total + i];
    store_out(s, bias, bdt, out, odt, i / O, i % O, O);
  }
}

}  // namespace

void launch_tc_chain_sum(const float* part, int chains, const void* bias, int bdt, void* out, int odt, int64_t N,
                         int64_t O, cudaStream_t s) {
  matmul_tc_chain_sum<<<blocks_for(N * O, 256), 256, 0, s>>>(part, chains, bias, bdt, out, odt, N, O);
}

namespace {

template <class T>
void launch_typed(const void* x, const void* w, const void* bias, int bdt, void* out, int odt, int64_t N, int64_t K,
                  int64_t O, const TcChoice& choice, float* workspace, cudaStream_t s) {
  const bool vec = K % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  const T* xt = static_cast<const T*>(x);
  const TcStored<T> wt{static_cast<const T*>(w)};
  if (!choice.tc4) {
    launch_tc8(vec, xt, wt, bias, bdt, out, odt, N, K, O, choice.panel, workspace, s);
    return;
  }
  if (N <= kNarrowRows) {
    const int64_t col_tiles = (O + 15) / 16;
    if (col_tiles > 65535) throw Error(str("cuda matmul: ", O, " output columns exceed the grid (", 65535 * 16, ")"));
    const dim3 grid(static_cast<unsigned>((N + 15) / 16), static_cast<unsigned>(col_tiles));
    matmul_tc_narrow<T><<<grid, 32 * kChains, 0, s>>>(xt, wt.w, bias, bdt, out, odt, N, K, O, vec);
  } else {
    matmul_tc_wide<T, kChains><<<wide_grid(N, O, choice.panel), 128, 0, s>>>(xt, wt, bias, bdt, out, odt, N, K, O, vec,
                                                                             choice.panel);
  }
  LINNET_CUDA_LAUNCH_CHECK();
}

}  // namespace
}  // namespace tc

bool matmul_tc_applies(int xdt, int wdt) { return xdt == wdt && (xdt == kBF16 || xdt == kF16); }

int64_t matmul_tc_workspace(int64_t N, int64_t O, const TcChoice& choice) {
  return N <= tc::kNarrowRows && !choice.tc4 ? static_cast<int64_t>(tc::kChains8) * N * O : 0;
}

void launch_matmul_tc(const void* x, int xdt, const void* w, const void* bias, int bdt, void* out, int odt, int64_t N,
                      int64_t K, int64_t O, const TcChoice& choice, float* workspace, cudaStream_t s) {
  if (N == 0 || O == 0) return;
  if (xdt == kBF16)
    tc::launch_typed<__nv_bfloat16>(x, w, bias, bdt, out, odt, N, K, O, choice, workspace, s);
  else
    tc::launch_typed<__half>(x, w, bias, bdt, out, odt, N, K, O, choice, workspace, s);
}

}  // namespace linnet::cuda
