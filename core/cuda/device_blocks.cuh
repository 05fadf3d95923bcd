// Device code written once and used by several kernels whose bits must agree:
// - simt_tile: matmul's SIMT product tile, used by matmul (matmul.cu) and grouped_matmul
//   (moe.cu): a row's bits are the same through either (batch invariance, docs/numerics.md);
// - online_softmax_step and accumulate_values: a warp folding a tile of keys into its query's
//   running max, sum and output (attention.cu, every attention kernel);
// - better and block_best: the largest (value, index) of a block, lowest index on ties
//   (argmax and Gumbel-max, one block a row or a piece of a row: logits.cu).
#pragma once
#include <climits>

#include "core/cuda/cuda_common.cuh"

namespace linnet::cuda {

// ---- the SIMT matrix tile ---------------------------------------------------------------------
namespace tile {
constexpr int kBM = 32, kBN = 64, kBK = 32;  // 256 threads, each 2 rows × 4 columns
constexpr int kThreads = 256;
struct Shared {
  float xs[kBK][kBM + 1];  // [k][row]: a step's slice of x, transposed
  float ws[kBK][kBN + 4];  // [k][column]
};
}  // namespace tile

// A dense weight matrix [·, K] of a float dtype: weight (r, k) widened to f32.
struct DenseWeights {
  const void* __restrict__ w;
  int wdt;
  int64_t K;
  __device__ __forceinline__ float operator()(int64_t r, int64_t k) const { return load_any(w, wdt, r * K + k); }
};

// acc[i][j] = Σ_k x[m0 + 2·ty + i, k] · w(wrow + n0 + 4·tx + j, k) for this thread (tx =
// threadIdx.x % 16, ty = threadIdx.x / 16): one f32 fused multiply-add chain per output over
// k = 0 … K−1 in order, whatever the rows around it. x rows at or past row_end and w rows at or
// past wrow + O are read as zeros. x [·, K]; w(r, k) gives a weight as f32: DenseWeights, or a
// quantized matrix's dequantization (core/cuda/quantized_matmul.cu), so a quantized product is
// the dense one on its dequantized weights, bit for bit.
template <class W>
__device__ __forceinline__ void simt_tile(const void* __restrict__ x, int xdt, const W& w, int64_t m0, int64_t row_end,
                                          int64_t wrow, int64_t n0, int64_t K, int64_t O, tile::Shared& sh,
                                          float (&acc)[2][4]) {
  using namespace tile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    // Consecutive threads read consecutive k of one row: coalesced.
    for (int i = threadIdx.x; i < kBM * kBK; i += kThreads) {
      const int r = i / kBK, k = i % kBK;
      const int64_t gr = m0 + r, gk = k0 + k;
      sh.xs[k][r] = gr < row_end && gk < K ? load_any(x, xdt, gr * K + gk) : 0.f;
    }
    for (int i = threadIdx.x; i < kBN * kBK; i += kThreads) {
      const int c = i / kBK, k = i % kBK;
      const int64_t gc = n0 + c, gk = k0 + k;
      sh.ws[k][c] = gc < O && gk < K ? w(wrow + gc, gk) : 0.f;
    }
    __syncthreads();
    // Past K the slices are zeros: fma(0, 0, acc) is acc, for every row count alike.
#pragma unroll 8
    for (int k = 0; k < kBK; ++k) {
      const float a0 = sh.xs[k][2 * ty], a1 = sh.xs[k][2 * ty + 1];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float b = sh.ws[k][4 * tx + j];
        acc[0][j] = fmaf(a0, b, acc[0][j]);
        acc[1][j] = fmaf(a1, b, acc[1][j]);
      }
    }
    __syncthreads();
  }
}

// ---- the online softmax ----------------------------------------------------------------------
// One warp folds a tile's scores into its query's running (m, l, acc): lane j holds key j's
// score s (valid: whether it counts). Sets p (this lane's weight, 0 where not valid) and
// returns true when the tile's values are to be accumulated (accumulate_values); false when
// the row became NaN or nothing valid has been seen yet. Warp-uniform.
template <int DCH>
__device__ __forceinline__ bool online_softmax_step(float s, bool valid, float& m, float& l, float (&acc)[DCH],
                                                    float& p) {
  // A NaN score (from a NaN or Inf activation) makes the row NaN, as the reference's softmax
  // does; fmaxf alone would drop it and the key would count as masked.
  if (__any_sync(0xffffffffu, valid && isnan(s))) {  // warp-uniform
    m = l = NAN;
#pragma unroll
    for (int c = 0; c < DCH; ++c) acc[c] = NAN;
    return false;
  }
  const float m_new = fmaxf(m, warp_max(s));
  if (m_new == -INFINITY) return false;  // warp-uniform: nothing valid so far
  p = valid ? expf(s - m_new) : 0.f;
  const float alpha = expf(m - m_new);  // 0 when m was -inf
  l = l * alpha + warp_sum(p);
  m = m_new;
#pragma unroll
  for (int c = 0; c < DCH; ++c) acc[c] *= alpha;
  return true;
}

// acc[c] += Σ_j p_sh[j] · v[j, lane + 32·c] over the tile's kTile keys, in order of j (rows of
// ldv elements of V, f32 or 16-bit). Zero weights (masked keys) are skipped.
template <int kTile, class V, int DCH>
__device__ __forceinline__ void accumulate_values(const float* p_sh, const V* vs, int ldv, int D, float (&acc)[DCH]) {
  const int lane = threadIdx.x & 31;
  for (int j = 0; j < kTile; ++j) {
    const float pj = p_sh[j];
    if (pj == 0.f) continue;  // warp-uniform (a broadcast read); also skips masked keys
    const V* v = vs + j * ldv;
#pragma unroll
    for (int c = 0; c < DCH; ++c) {
      const int d = lane + 32 * c;
      if (d < D) acc[c] = fmaf(pj, to_f(v[d]), acc[c]);
    }
  }
}

// ---- the block argmax ------------------------------------------------------------------------
// (bv, bi) ← (v, i) when v is larger, or equal at a lower index.
__device__ __forceinline__ void better(float v, int64_t i, float& bv, int64_t& bi) {
  if (v > bv || (v == bv && i < bi)) {
    bv = v;
    bi = i;
  }
}

// The block's best of its threads' (bv, bi) by better(): left in thread 0, which returns true.
// Every thread of the block calls it (blockDim.x a multiple of 32, at most 1024).
__device__ __forceinline__ bool block_best(float& bv, int64_t& bi) {
  __shared__ float sv[32];
  __shared__ long long si[32];
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
  if (warp != 0) return false;
  const int nwarps = blockDim.x >> 5;
  bv = lane < nwarps ? sv[lane] : -INFINITY;
  bi = lane < nwarps ? si[lane] : LLONG_MAX;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const long long oi = __shfl_xor_sync(0xffffffffu, static_cast<long long>(bi), o);
    better(ov, oi, bv, bi);
  }
  return lane == 0;
}

}  // namespace linnet::cuda
