// The tensor-core kernels of matmul_tc.cu, shared with the quantized product's
// (matmul_tc_quantized.cu): the current family's split-K and wide kernels over a weight source
// W (TcStored: dense rows of T; or weights dequantized as they load), so both products run the
// same mma steps in the same order. Only .cu files include this.
#pragma once
#include <mma.h>

#include <atomic>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/kernels.cuh"

namespace linnet::cuda::tc {

namespace wmma = nvcuda::wmma;

constexpr int kChains = 4;   // the earlier family (tc4)
constexpr int kChains8 = 8;  // the current family (auto)
constexpr int64_t kNarrowRows = 64;

// Chain q's first k of C: q·K/C rounded up to a whole mma step of 16, at most K.
template <int C>
__device__ __forceinline__ int64_t chain_begin(int64_t K, int q) {
  if (q >= C) return K;
  const int64_t b = (q * K / C + 15) / 16 * 16;
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

// How the kernels below read their weights w[O, K]. TcStored: rows of T as stored, in 16-byte
// vectors where K and the base allow. A source with kStored false gives each weight as a value
// of T, w(row, k) (a quantized matrix dequantized as it loads: matmul_tc_quantized.cu), loaded
// element by element into the same shared-memory tiles, so the mma steps are the same.
template <class T>
struct TcStored {
  const T* w;
  static constexpr bool kStored = true;
};

template <class T, int R, int KS, int LD, int threads, class W>
__device__ __forceinline__ void load_weights_by_element(T* dst, const W& w, int64_t row0, int64_t rows, int64_t k0,
                                                        int64_t K, int t) {
  for (int e = t; e < R * KS; e += threads) {
    const int r = e / KS, k = e % KS;
    const int64_t gr = row0 + r, gk = k0 + k;
    dst[r * LD + k] = gr < rows && gk < K ? w(gr, gk) : from_f<T>(0.f);
  }
}

// out[r][c] = s (+ bias[c]), rounded once to out's dtype.
__device__ __forceinline__ void store_out(float s, const void* bias, int bdt, void* out, int odt, int64_t r, int64_t c,
                                          int64_t O) {
  store_any(out, odt, r * O + c, bias ? s + load_any(bias, bdt, c) : s);
}

// out[r][c] = ((part[0][r][c] + part[1][r][c]) + …) + part[C−1][r][c] (+ bias[c]): the order the
// wide kernel adds its chains in (matmul_tc.cu).
void launch_tc_chain_sum(const float* part, int chains, const void* bias, int bdt, void* out, int odt, int64_t N,
                         int64_t O, cudaStream_t s);

// ---- wide: 64 × 64 outputs a block, 2 × 2 warps of 32 × 32; the chains in turn ---------------
constexpr int kWT = 64, kWKS = 32, kWLD = kWKS + 8, kWCLD = kWT + 4;

template <class T, int C, class W>
__global__ void __launch_bounds__(128)
    matmul_tc_wide(const T* __restrict__ x, W w, const void* __restrict__ bias, int bdt,
                   void* __restrict__ out, int odt, int64_t N, int64_t K, int64_t O, bool vec, bool panel) {
  __shared__ __align__(128) T xs[kWT * kWLD];
  __shared__ __align__(128) T ws[kWT * kWLD];
  __shared__ __align__(128) float cs[kWT * kWCLD];
  const int warp = threadIdx.x / 32, wr = warp / 2 * 32, wc = warp % 2 * 32;
  // panel: blockIdx.x walks the row tiles of the weight panel blockIdx.y (L2 reuse of the
  // panel); else blockIdx.x walks the column tiles of the row tile blockIdx.y.
  const int64_t n0 = static_cast<int64_t>(panel ? blockIdx.y : blockIdx.x) * kWT,
                m0 = static_cast<int64_t>(panel ? blockIdx.x : blockIdx.y) * kWT;
  FragC total[2][2], acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(total[i][j], 0.f);  // never read: q == 0 copies
  for (int q = 0; q < C; ++q) {
    const int64_t kb = chain_begin<C>(K, q), ke = chain_begin<C>(K, q + 1);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);
    VectorTile<T, kWT, kWKS, kWLD, 128> xt, wt;
    if (vec && kb < ke) {
      xt.fetch(x, m0, N, kb, K, threadIdx.x);
      if constexpr (W::kStored) wt.fetch(w.w, n0, O, kb, K, threadIdx.x);
    }
    for (int64_t k0 = kb; k0 < ke; k0 += kWKS) {
      __syncthreads();  // the previous step's fragments are read
      if (vec)
        xt.put(xs, threadIdx.x);
      else
        load_tile_by_element<T, kWT, kWKS, kWLD, 128>(xs, x, m0, N, k0, K, threadIdx.x);
      if constexpr (!W::kStored)
        load_weights_by_element<T, kWT, kWKS, kWLD, 128>(ws, w, n0, O, k0, K, threadIdx.x);
      else if (vec)
        wt.put(ws, threadIdx.x);
      else
        load_tile_by_element<T, kWT, kWKS, kWLD, 128>(ws, w.w, n0, O, k0, K, threadIdx.x);
      __syncthreads();
      if (vec && k0 + kWKS < ke) {  // the next step's loads fly while this one multiplies
        xt.fetch(x, m0, N, k0 + kWKS, K, threadIdx.x);
        if constexpr (W::kStored) wt.fetch(w.w, n0, O, k0 + kWKS, K, threadIdx.x);
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
    // total = ((c0 + c1) + c2) + …, element by element (accumulators share one layout).
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

// ---- split-K: 16·RT rows × 64 columns × one chain a block; the chains summed by a second kernel ----
constexpr int kSKS = 64, kSLD = kSKS + 8;  // k a stage; row stride in shared memory (16-byte pad)
constexpr int kSStages = 4;                // stages in shared memory: three in flight while one multiplies
constexpr int kSCols = 64;                 // columns a block: four warps of 16
constexpr int kSCLD = 20;                  // the result tiles' row stride (floats) in shared memory

// Shared memory of a block of RT row tiles: the x and w stages, reused for the results.
template <class T, int RT>
constexpr size_t splitk_smem() {
  return sizeof(T) * kSStages * (16 * RT + kSCols) * kSLD;
}

// grid (⌈N/(16·RT)⌉, C, ⌈O/64⌉). Block (z, q, g): rows 16·RT·z …, chain q, columns 64g …; warp j
// takes columns 64g + 16j … of all RT row tiles, its weight fragment loaded once for the RT
// mma steps (RT = 4 at 33 … 64 rows: the block's weight tile read once from L2 for 64 rows,
// where four 16-row blocks each read it; Nsight Compute showed the Batch 64 step bound by those
// shared-memory loads). Each accumulator still runs its chain's mma steps in order from zero, so
// RT changes no bit. part[q][r][c] = chain q of element (r, c), f32 (rows < N, columns < O).
template <class T, bool kVec, int RT, class W>
__global__ void __launch_bounds__(128)
    matmul_tc_splitk(const T* __restrict__ x, W w, float* __restrict__ part, int64_t N,
                     int64_t K, int64_t O) {
  constexpr int kRows = 16 * RT;
  extern __shared__ __align__(128) unsigned char splitk_sh[];
  T* xs0 = reinterpret_cast<T*>(splitk_sh);           // [kSStages][kRows × kSLD]
  T* ws0 = xs0 + kSStages * kRows * kSLD;              // [kSStages][kSCols × kSLD]
  auto xs = [&](int b) { return xs0 + b * kRows * kSLD; };
  auto ws = [&](int b) { return ws0 + b * kSCols * kSLD; };
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int64_t c0 = static_cast<int64_t>(blockIdx.z) * kSCols, m0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int q = blockIdx.y;
  const int64_t kb = chain_begin<kChains8>(K, q), ke = chain_begin<kChains8>(K, q + 1);
  const int steps = static_cast<int>((ke - kb + kSKS - 1) / kSKS);
  FragC acc[RT];
#pragma unroll
  for (int i = 0; i < RT; ++i) wmma::fill_fragment(acc[i], 0.f);
  // The stage's mma steps: those of the chain (k < ke), in order — the steps the wide kernel
  // runs for this chain. Values loaded past ke belong to the next chain and are not used.
  auto multiply = [&](int buf, int64_t k0) {
    for (int kk = 0; kk < kSKS && k0 + kk < ke; kk += 16) {
      FragB<T> b;
      wmma::load_matrix_sync(b, ws(buf) + warp * 16 * kSLD + kk, kSLD);
#pragma unroll
      for (int i = 0; i < RT; ++i) {
        FragA<T> a;
        wmma::load_matrix_sync(a, xs(buf) + i * 16 * kSLD + kk, kSLD);
        wmma::mma_sync(acc[i], a, b, acc[i]);
      }
    }
  };
  if constexpr (kVec) {
    // Stage s: x rows m0 … m0+16·RT−1 and w rows c0 … c0+63 at k kb + 64s …, as 16-byte cp.async
    // (zeros past N, O and K: a vector is wholly inside or past K, K being a multiple of 8). A
    // weight source that is not stored as T is written into the stage by each thread directly,
    // at the same place in the pipeline: the barrier before the stage is read covers both.
    auto issue = [&](int s, int buf) {
      const int64_t k0 = kb + static_cast<int64_t>(s) * kSKS;
#pragma unroll
      for (int i = 0; i < kRows * kSKS / 8 / 128; ++i) {
        const int e = t + i * 128, r = e / 8, k = e % 8 * 8;
        const int64_t gr = m0 + r, gk = k0 + k;
        const bool ok = gr < N && gk < K;
        cp_async16(&xs(buf)[r * kSLD + k], ok ? x + gr * K + gk : x, ok);
      }
      if constexpr (W::kStored) {
#pragma unroll
        for (int i = 0; i < kSCols * kSKS / 8 / 128; ++i) {
          const int e = t + i * 128, r = e / 8, k = e % 8 * 8;
          const int64_t gr = c0 + r, gk = k0 + k;
          const bool ok = gr < O && gk < K;
          cp_async16(&ws(buf)[r * kSLD + k], ok ? w.w + gr * K + gk : w.w, ok);
        }
      } else {
        load_weights_by_element<T, kSCols, kSKS, kSLD, 128>(ws(buf), w, c0, O, k0, K, t);
      }
    };
#pragma unroll
    for (int s = 0; s < kSStages - 1; ++s) {
      if (s < steps) issue(s, s);
      cp_async_commit();  // an empty group where the chain is short: the counting stays uniform
    }
    for (int s = 0; s < steps; ++s) {
      cp_async_wait<kSStages - 2>();  // stage s has landed (this thread's copies)
      __syncthreads();                // everyone's; and everyone is done with stage s − 1
      if (s + kSStages - 1 < steps) issue(s + kSStages - 1, (s + kSStages - 1) % kSStages);
      cp_async_commit();
      multiply(s % kSStages, kb + static_cast<int64_t>(s) * kSKS);
    }
    cp_async_wait<0>();
  } else {
    for (int s = 0; s < steps; ++s) {
      const int64_t k0 = kb + static_cast<int64_t>(s) * kSKS;
      __syncthreads();
      load_tile_by_element<T, kRows, kSKS, kSLD, 128>(xs(0), x, m0, N, k0, K, t);
      if constexpr (W::kStored)
        load_tile_by_element<T, kSCols, kSKS, kSLD, 128>(ws(0), w.w, c0, O, k0, K, t);
      else
        load_weights_by_element<T, kSCols, kSKS, kSLD, 128>(ws(0), w, c0, O, k0, K, t);
      __syncthreads();
      multiply(0, k0);
    }
  }
  __syncthreads();  // the stages are free: they hold each warp's RT result tiles of 16 × 16
  float* cs = reinterpret_cast<float*>(splitk_sh) + warp * RT * 16 * kSCLD;
#pragma unroll
  for (int i = 0; i < RT; ++i) wmma::store_matrix_sync(cs + i * 16 * kSCLD, acc[i], kSCLD, wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < RT * 256; e += 32) {
    const int r = e / 16, c = e % 16;
    const int64_t gr = m0 + r, gc = c0 + warp * 16 + c;
    if (gr < N && gc < O) part[(static_cast<int64_t>(q) * N + gr) * O + gc] = cs[r * kSCLD + c];
  }
}

// The results' staging (4 warps × RT tiles × 16 × kSCLD floats) fits in the stages.
static_assert(4 * 1 * 16 * kSCLD * sizeof(float) <= splitk_smem<__half, 1>());
static_assert(4 * 4 * 16 * kSCLD * sizeof(float) <= splitk_smem<__half, 4>());

template <class T, int RT, class W>
void launch_splitk(bool vec, const T* x, const W& w, float* part, int64_t N, int64_t K, int64_t O, int64_t groups,
                   cudaStream_t s) {
  constexpr size_t smem = splitk_smem<T, RT>();
  const dim3 grid(static_cast<unsigned>((N + 16 * RT - 1) / (16 * RT)), kChains8, static_cast<unsigned>(groups));
  auto kernel = vec ? matmul_tc_splitk<T, true, RT, W> : matmul_tc_splitk<T, false, RT, W>;
  if constexpr (smem > 48 * 1024) {
    // Past 48 KiB the kernel must be allowed, once per device: the first launch of a step is
    // never inside a graph capture (a sequence is captured the second time it is seen).
    static std::atomic<uint64_t> allowed{0};
    int dev = 0;
    LINNET_CUDA_CHECK(cudaGetDevice(&dev));
    const uint64_t bit = uint64_t{1} << (dev & 63);
    if (!(allowed.load() & bit)) {
      for (auto* k : {matmul_tc_splitk<T, true, RT, W>, matmul_tc_splitk<T, false, RT, W>})
        LINNET_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      allowed.fetch_or(bit);
    }
  }
  kernel<<<grid, 128, smem, s>>>(x, w, part, N, K, O);
}

// The wide kernel's grid. The slow grid index is limited to 65535: rows when walking columns
// first, columns when walking row panels.
inline dim3 wide_grid(int64_t N, int64_t O, bool panel) {
  const int64_t row_tiles = (N + kWT - 1) / kWT, col_tiles = (O + kWT - 1) / kWT;
  if (!panel && row_tiles > 65535) throw Error(str("cuda matmul: ", N, " rows exceed the grid (", 65535 * kWT, ")"));
  if (panel && col_tiles > 65535)
    throw Error(str("cuda matmul: ", O, " output columns exceed the grid (", 65535 * kWT, ")"));
  return panel ? dim3(static_cast<unsigned>(row_tiles), static_cast<unsigned>(col_tiles))
               : dim3(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_tiles));
}

// out = x · wᵀ (+ bias) by the current family (C = 8 chains) on weight source W: split-K up to
// kNarrowRows rows (its chains into workspace, then summed in order), else the wide kernel.
// The same bits for any N. vec: x (and a stored w) in 16-byte vectors. kRowTiles false: split-K
// blocks of 16 rows only (fewer kernels to build; the row tiles change no bit).
template <class T, class W, bool kRowTiles = true>
void launch_tc8(bool vec, const T* x, const W& w, const void* bias, int bdt, void* out, int odt, int64_t N, int64_t K,
                int64_t O, bool panel, float* workspace, cudaStream_t s) {
  if (N <= kNarrowRows) {
    if (!workspace) throw Error("cuda matmul: the split-K product needs its workspace");
    const int64_t groups = (O + kSCols - 1) / kSCols;
    if (groups > 65535) throw Error(str("cuda matmul: ", O, " output columns exceed the grid (", 65535 * kSCols, ")"));
    // Row tiles a block: 1 up to 16 rows (a decode step at Batch 1: more blocks), 2 up to 32,
    // else 4 (one weight tile in shared memory for all 64 rows). Speed only: the same bits.
    if constexpr (kRowTiles) {
      if (N <= 16)
        launch_splitk<T, 1>(vec, x, w, workspace, N, K, O, groups, s);
      else if (N <= 32)
        launch_splitk<T, 2>(vec, x, w, workspace, N, K, O, groups, s);
      else
        launch_splitk<T, 4>(vec, x, w, workspace, N, K, O, groups, s);
    } else {
      launch_splitk<T, 1>(vec, x, w, workspace, N, K, O, groups, s);
    }
    LINNET_CUDA_LAUNCH_CHECK();
    launch_tc_chain_sum(workspace, kChains8, bias, bdt, out, odt, N, O, s);
    LINNET_CUDA_LAUNCH_CHECK();
    return;
  }
  const dim3 grid = wide_grid(N, O, panel);
  matmul_tc_wide<T, kChains8><<<grid, 128, 0, s>>>(x, w, bias, bdt, out, odt, N, K, O, vec, panel);
  LINNET_CUDA_LAUNCH_CHECK();
}

}  // namespace linnet::cuda::tc
