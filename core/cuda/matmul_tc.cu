// The tensor-core matrix product, for x and w of one 16-bit dtype (bf16 or f16), still batch
// invariant (docs/numerics.md). Each output element is ((c0 + c1) + c2) + c3 + bias, where
// chain c_q is a run of 16×16×16 mma steps (f32 accumulators, WMMA) over its fixed range
// [b_q, b_q+1) of k in order, started from zero; the ranges depend on K alone. An mma's
// element (i, j) depends only on row i of its A, column j of its B and its own accumulator,
// so any tiling of rows and columns gives the same bits as long as each element's chains run
// the same mma steps in the same order. Two tilings use that:
//   narrow (N ≤ kNarrowRows): 16 rows × 16 columns a block, the four chains in four warps
//           side by side (a decode step: many blocks, loads in flight, short chains);
//   wide:   64 × 64 a block, four warps of 32 × 32, the chains one after another in each
//           warp (prefill: each weight tile loaded once per 64 rows).
// Rows past N and k past K are zeros that are loaded as zeros and never stored.
#include <mma.h>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/kernels.cuh"

namespace linnet::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kChains = 4;
constexpr int64_t kNarrowRows = 64;

// Chain q's first k: q·K/4 rounded up to a whole mma step of 16, at most K.
__device__ __forceinline__ int64_t chain_begin(int64_t K, int q) {
  if (q >= kChains) return K;
  const int64_t b = (q * K / kChains + 15) / 16 * 16;
  return b < K ? b : K;
}

template <class T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <class T>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// An R × KS tile of src rows [row0, row0 + R), k [k0, k0 + KS) — zeros past `rows` and K —
// shared by `threads` threads (index t), staged through registers as 16-byte vectors: fetch
// issues the loads (the next tile's, while the current one is multiplied), put stores them
// into shared memory (row stride LD). For K % 8 == 0 and 16-byte aligned bases; else
// load_tile_by_element. Both load the same values.
template <class T, int R, int KS, int LD, int threads>
struct VectorTile {
  static constexpr int kVecs = R * KS / 8, kPer = kVecs / threads;
  static_assert(kVecs % threads == 0, "the tile splits evenly over the threads");
  uint4 v[kPer];

  __device__ __forceinline__ void fetch(const T* __restrict__ src, int64_t row0, int64_t rows, int64_t k0, int64_t K,
                                        int t) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = t + i * threads, r = e / (KS / 8), k = e % (KS / 8) * 8;
      const int64_t gr = row0 + r, gk = k0 + k;
      // gk is a multiple of 8 and so is K: a vector is wholly inside the row or wholly past it.
      v[i] = gr < rows && gk < K ? *reinterpret_cast<const uint4*>(src + gr * K + gk) : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ __forceinline__ void put(T* dst, int t) const {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = t + i * threads, r = e / (KS / 8), k = e % (KS / 8) * 8;
      *reinterpret_cast<uint4*>(dst + r * LD + k) = v[i];
    }
  }
};

template <class T, int R, int KS, int LD, int threads>
__device__ __forceinline__ void load_tile_by_element(T* dst, const T* __restrict__ src, int64_t row0, int64_t rows,
                                                     int64_t k0, int64_t K, int t) {
  for (int e = t; e < R * KS; e += threads) {
    const int r = e / KS, k = e % KS;
    const int64_t gr = row0 + r, gk = k0 + k;
    dst[r * LD + k] = gr < rows && gk < K ? src[gr * K + gk] : from_f<T>(0.f);
  }
}

// out[r][c] = s (+ bias[c]), rounded once to out's dtype.
__device__ __forceinline__ void store_out(float s, const void* bias, int bdt, void* out, int odt, int64_t r, int64_t c,
                                          int64_t O) {
  store_any(out, odt, r * O + c, bias ? s + load_any(bias, bdt, c) : s);
}

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
  const int64_t kb = chain_begin(K, q), ke = chain_begin(K, q + 1);
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

// ---- wide: 64 × 64 outputs a block, 2 × 2 warps of 32 × 32; the chains in turn ---------------
constexpr int kWT = 64, kWKS = 32, kWLD = kWKS + 8, kWCLD = kWT + 4;

template <class T>
__global__ void __launch_bounds__(128)
    matmul_tc_wide(const T* __restrict__ x, const T* __restrict__ w, const void* __restrict__ bias, int bdt,
                   void* __restrict__ out, int odt, int64_t N, int64_t K, int64_t O, bool vec) {
  __shared__ __align__(128) T xs[kWT * kWLD];
  __shared__ __align__(128) T ws[kWT * kWLD];
  __shared__ __align__(128) float cs[kWT * kWCLD];
  const int warp = threadIdx.x / 32, wr = warp / 2 * 32, wc = warp % 2 * 32;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kWT, m0 = static_cast<int64_t>(blockIdx.y) * kWT;
  FragC total[2][2], acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(total[i][j], 0.f);  // never read: q == 0 copies
  for (int q = 0; q < kChains; ++q) {
    const int64_t kb = chain_begin(K, q), ke = chain_begin(K, q + 1);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);
    VectorTile<T, kWT, kWKS, kWLD, 128> xt, wt;
    if (vec && kb < ke) {
      xt.fetch(x, m0, N, kb, K, threadIdx.x);
      wt.fetch(w, n0, O, kb, K, threadIdx.x);
    }
    for (int64_t k0 = kb; k0 < ke; k0 += kWKS) {
      __syncthreads();  // the previous step's fragments are read
      if (vec) {
        xt.put(xs, threadIdx.x);
        wt.put(ws, threadIdx.x);
      } else {
        load_tile_by_element<T, kWT, kWKS, kWLD, 128>(xs, x, m0, N, k0, K, threadIdx.x);
        load_tile_by_element<T, kWT, kWKS, kWLD, 128>(ws, w, n0, O, k0, K, threadIdx.x);
      }
      __syncthreads();
      if (vec && k0 + kWKS < ke) {  // the next step's loads fly while this one multiplies
        xt.fetch(x, m0, N, k0 + kWKS, K, threadIdx.x);
        wt.fetch(w, n0, O, k0 + kWKS, K, threadIdx.x);
      }
      for (int kk = 0; kk < kWKS && k0 + kk < ke; kk += 16) {
        FragA<T> a[2];
        FragB<T> b[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], xs + (wr + 16 * i) * kWLD + kk, kWLD);
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], ws + (wc + 16 * j) * kWLD + kk, kWLD);
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
      }
    }
    // total = ((c0 + c1) + c2) + c3, element by element (accumulators share one layout).
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < acc[i][j].num_elements; ++e)
          total[i][j].x[e] = q == 0 ? acc[i][j].x[e] : total[i][j].x[e] + acc[i][j].x[e];
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(cs + (wr + 16 * i) * kWCLD + wc + 16 * j, total[i][j], kWCLD, wmma::mem_row_major);
  __syncthreads();
  for (int e = threadIdx.x; e < kWT * kWT; e += 128) {
    const int r = e / kWT, c = e % kWT;
    const int64_t gr = m0 + r, gc = n0 + c;
    if (gr < N && gc < O) store_out(cs[r * kWCLD + c], bias, bdt, out, odt, gr, gc, O);
  }
}

template <class T>
void launch_typed(const void* x, const void* w, const void* bias, int bdt, void* out, int odt, int64_t N, int64_t K,
                  int64_t O, cudaStream_t s) {
  const bool vec = K % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  const T* xt = static_cast<const T*>(x);
  const T* wt = static_cast<const T*>(w);
  if (N <= kNarrowRows) {
    const int64_t col_tiles = (O + 15) / 16;
    if (col_tiles > 65535) throw Error(str("cuda matmul: ", O, " output columns exceed the grid (", 65535 * 16, ")"));
    const dim3 grid(static_cast<unsigned>((N + 15) / 16), static_cast<unsigned>(col_tiles));
    matmul_tc_narrow<T><<<grid, 32 * kChains, 0, s>>>(xt, wt, bias, bdt, out, odt, N, K, O, vec);
  } else {
    const int64_t row_tiles = (N + kWT - 1) / kWT;
    if (row_tiles > 65535) throw Error(str("cuda matmul: ", N, " rows exceed the grid (", 65535 * kWT, ")"));
    const dim3 grid(static_cast<unsigned>((O + kWT - 1) / kWT), static_cast<unsigned>(row_tiles));
    matmul_tc_wide<T><<<grid, 128, 0, s>>>(xt, wt, bias, bdt, out, odt, N, K, O, vec);
  }
  LINNET_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool matmul_tc_applies(int xdt, int wdt) { return xdt == wdt && (xdt == kBF16 || xdt == kF16); }

void launch_matmul_tc(const void* x, int xdt, const void* w, const void* bias, int bdt, void* out, int odt, int64_t N,
                      int64_t K, int64_t O, cudaStream_t s) {
  if (N == 0 || O == 0) return;
  if (xdt == kBF16)
    launch_typed<__nv_bfloat16>(x, w, bias, bdt, out, odt, N, K, O, s);
  else
    launch_typed<__half>(x, w, bias, bdt, out, odt, N, K, O, s);
}

}  // namespace linnet::cuda
