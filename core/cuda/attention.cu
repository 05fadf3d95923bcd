// Attention kernels: packed causal attention among fresh tokens (flash-attention style tiles
// in shared memory, online softmax in f32) and attention over the paged KV cache
// (flash-decoding: the sequence is split, each split keeps a partial max/sum/accumulator,
// a second kernel combines them).
//
// Layout shared by both: a warp owns one query (one q head of one token). A tile of kBK = 32
// keys sits in shared memory as f32 (K rows padded to D + 1 floats so that lane j reading
// row j is free of bank conflicts); lane j scores key j, the warp takes the tile's max and sum,
// and each lane accumulates output dims lane, lane + 32, … (DCH = ceil(D / 32) of them).
#include <algorithm>
#include <climits>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/device_blocks.cuh"
#include "core/cuda/kernels.cuh"

namespace linnet::cuda {
namespace {

constexpr int kBK = 32;     // keys per tile
constexpr int kBQ = 16;     // queries per block in attention_packed
constexpr int kWarps = 4;   // warps per block in attention_packed
constexpr int kRowsPerWarp = kBQ / kWarps;

// attention_cache's piece of a token's keys: `base` positions (LINNET_CUDA_CACHE_SPLIT, 256 by
// default) up to 64 pieces (16K keys at 256), then 1/64 of its length in whole tiles — from
// its own length only, so its sum is the same whatever the call holds. At most
// kMaxCacheSplits pieces.
constexpr int kMaxCacheSplits = 64;
__host__ __device__ inline int64_t cache_split_len(int64_t len, int64_t base) {
  if (len <= base * kMaxCacheSplits) return base;
  const int64_t piece = (len + kMaxCacheSplits - 1) / kMaxCacheSplits;
  return (piece + kBK - 1) / kBK * kBK;
}

// One warp folds one tile into its query's running (m, l, acc) by the online-softmax step of
// core/cuda/device_blocks.cuh. q: the query in shared memory, already scaled; valid: whether
// this lane's key (row `lane` of the tile) counts. Keys that don't count contribute nothing,
// whatever their K/V rows hold.
// softcap > 0: the score becomes softcap·tanh(score / softcap) (Gemma 2), before the mask.
template <int DCH>
__device__ __forceinline__ void attend_tile(const float* q, const float* ks, const float* vs,
                                            float* p_sh, int D, bool valid, float softcap, float& m, float& l,
                                            float (&acc)[DCH]) {
  const int lane = threadIdx.x & 31;
  float s = -INFINITY;
  if (valid) {
    const float* k = ks + lane * (D + 1);
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot = fmaf(q[d], k[d], dot);
    s = softcap > 0.f ? __fmul_rn(tanhf(__fdiv_rn(dot, softcap)), softcap) : dot;
  }
  float p;
  if (!online_softmax_step(s, valid, m, l, acc, p)) return;
  p_sh[lane] = p;
  __syncwarp();
  accumulate_values<kBK>(p_sh, vs, D, D, acc);
  __syncwarp();
}

// ---- packed --------------------------------------------------------------------------------
// grid (ceil(N / kBQ), q_heads), block kWarps·32. Block: queries q0 … q0 + kBQ − 1 of one head.
template <class T, int DCH>
__global__ void __launch_bounds__(kWarps * 32)
    attention_packed_kernel(const T* __restrict__ qkv, int64_t N, int q_heads, int kv_heads,
                            int D, float scale, float softcap, int64_t window,
                            const int32_t* __restrict__ run_start, T* __restrict__ out, int kv_dt,
                            const float* __restrict__ sinks) {
  extern __shared__ float smem[];
  float* q_sh = smem;                   // [kBQ][D]
  float* k_sh = q_sh + kBQ * D;         // [kBK][D + 1]
  float* v_sh = k_sh + kBK * (D + 1);   // [kBK][D]
  float* p_sh = v_sh + kBK * D;         // [kWarps][kBK]
  // The block's queries by run (their run_start): each run's keys are walked in tiles that
  // start at the run's first token, so a query's tiles — and its online softmax — are the
  // same wherever its run sits in the call and whatever shares the block (batch invariance).
  __shared__ long long s_run[kBQ], s_last[kBQ];
  __shared__ int s_runs;

  const int h = blockIdx.y;
  const int kvh = h / (q_heads / kv_heads);
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kBQ;
  const int64_t width = static_cast<int64_t>(q_heads + 2 * kv_heads) * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  for (int i = threadIdx.x; i < kBQ * D; i += blockDim.x) {
    const int r = i / D, d = i - r * D;
    const int64_t n = q0 + r;
    q_sh[i] = n < N ? to_f(qkv[n * width + static_cast<int64_t>(h) * D + d]) * scale : 0.f;
  }
  if (threadIdx.x == 0) {
    int runs = 0;
    for (int r = 0; r < kBQ; ++r) {
      const int64_t n = q0 + r;
      if (n >= N || run_start[n] < 0) continue;
      int i = 0;
      while (i < runs && s_run[i] != run_start[n]) ++i;
      if (i == runs) s_run[runs++] = run_start[n];
      s_last[i] = n;  // queries come in order: the run's last so far
    }
    s_runs = runs;
  }
  __syncthreads();

  int64_t start[kRowsPerWarp], qn[kRowsPerWarp];
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][DCH];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    qn[r] = q0 + warp * kRowsPerWarp + r;
    start[r] = qn[r] < N ? run_start[qn[r]] : -1;
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < DCH; ++c) acc[r][c] = 0.f;
  }

  const int64_t k_off = static_cast<int64_t>(q_heads + kvh) * D;
  const int64_t v_off = static_cast<int64_t>(q_heads + kv_heads + kvh) * D;
  for (int run = 0; run < s_runs; ++run) {  // block-uniform
    const int64_t lo = s_run[run], hi = s_last[run];
    for (int64_t k0 = lo; k0 <= hi; k0 += kBK) {
      for (int i = threadIdx.x; i < kBK * D; i += blockDim.x) {
        const int j = i / D, d = i - j * D;
        const int64_t k = k0 + j;
        float kx = 0.f, vx = 0.f;
        if (k <= hi) {
          kx = to_f(qkv[k * width + k_off + d]);
          vx = to_f(qkv[k * width + v_off + d]);
          if (kv_dt >= 0) {  // a narrower cache: the values attention_cache would read back
            kx = round_through(kv_dt, kx);
            vx = round_through(kv_dt, vx);
          }
        }
        k_sh[j * (D + 1) + d] = kx;
        v_sh[j * D + d] = vx;
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        if (start[r] != lo || k0 > qn[r]) continue;  // warp-uniform
        // A sliding window: keys qn − window + 1 … qn. A tile wholly before it is skipped (its
        // fold would change nothing: every key masked).
        if (window > 0 && k0 + kBK <= qn[r] - window + 1) continue;  // warp-uniform
        const bool valid = k0 + lane <= qn[r] && (window == 0 || k0 + lane > qn[r] - window);
        attend_tile<DCH>(q_sh + (warp * kRowsPerWarp + r) * D, k_sh, v_sh, p_sh + warp * kBK, D,
                         valid, softcap, m[r], l[r], acc[r]);
      }
      __syncthreads();
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (start[r] < 0) continue;
    // A sink joins the denominator (its share of the softmax dropped): e^(sink − m) more.
    if (sinks && m[r] != -INFINITY) l[r] += expf(sinks[h] - m[r]);
    const float inv = l[r] > 0.f || isnan(l[r]) ? 1.f / l[r] : 0.f;  // NaN stays NaN
    T* o = out + qn[r] * static_cast<int64_t>(q_heads) * D + static_cast<int64_t>(h) * D;
#pragma unroll
    for (int c = 0; c < DCH; ++c) {
      const int d = lane + 32 * c;
      if (d < D) o[d] = from_f<T>(acc[r][c] * inv);
    }
  }
}

// ---- cache ---------------------------------------------------------------------------------
// grid (ceil(N / Q), q_heads / G, splits), block Q·G warps: warp w is token blockIdx.x·Q + w / G,
// q head blockIdx.y·G + w % G. The G heads share one kv head and the Q tokens (consecutive in
// the call) usually one cache row — a prefill chunk — so each K/V tile is read once for all
// of them: the block walks the distinct rows of its tokens in turn, and over each row the
// tiles of the union of its tokens' key ranges; a warp folds exactly the tiles of its own
// range [t_begin, t_end), with its own mask, in order — the operations it would do alone
// (Q = 1), so Q is a speed choice that never changes a bit. Writes, per (token, head,
// split), D accumulator values, then the running max and sum: partials [N, q_heads, splits,
// D + 2].
// kv_dt >= 0: the cache holds that dtype (a narrower cache, --kv-cache-dtype), read element by
// element and widened exactly (a run-time branch, uniform: one kernel for both); else it holds T.
// Two blocks of 16 warps an SM: 64 registers a thread (ptxas spills a few bytes to L1).
template <class T, int DCH>
__global__ void __launch_bounds__(512, 2)
    attention_cache_kernel(const T* __restrict__ qkv, int64_t N, int Q, int q_heads, int kv_heads, int D,
                           float scale, float softcap, int64_t window, int64_t max_seq, int64_t page_size,
                           int64_t cache_rows,
                           const int32_t* __restrict__ rows, const int32_t* __restrict__ positions,
                           const int32_t* __restrict__ table, int64_t R, int64_t pages,
                           const void* __restrict__ cache_k_raw, const void* __restrict__ cache_v_raw,
                           float* __restrict__ part, int split_base, int kv_dt) {
  extern __shared__ float smem[];
  const int warps = blockDim.x >> 5, G = warps / Q;
  float* q_sh = smem;                      // [warps][D]
  float* k_sh = q_sh + warps * D;          // [kBK][D + 1]
  float* v_sh = k_sh + kBK * (D + 1);      // [kBK][D]
  float* p_sh = v_sh + kBK * D;            // [warps][kBK]
  __shared__ int64_t key_at[kBK];          // a tile's keys in the cache (-1: missing)

  const int split = blockIdx.z, splits = gridDim.z;
  const int h0 = blockIdx.y * G;
  const int kvh = h0 / (q_heads / kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int h = h0 + warp % G;
  const int64_t n_first = static_cast<int64_t>(blockIdx.x) * Q;

  // A token's keys in this split: the token's own split length, never the batch's. The last
  // split takes whatever is left: a token past the call's span (a caller's broken contract)
  // is then slower, never silently short of keys. Every thread can ask this of any token.
  auto range = [&](int64_t n, int64_t& row, int64_t& t_begin, int64_t& t_end) {
    row = n < N ? rows[n] : -1;
    if (row < 0 || row >= R) {  // skipped token (the combine skips it too)
      row = -1;
      return;
    }
    const int64_t len = static_cast<int64_t>(positions[n]) + 1;
    const int64_t split_len = cache_split_len(len, split_base);
    t_begin = static_cast<int64_t>(split) * split_len;
    t_end = split == splits - 1 ? len : min(len, t_begin + split_len);
    // A sliding window: the tiles wholly before len − window are not walked (the splits stay
    // those of the token's own length; a split left empty is combined as one).
    if (window > 0) t_begin = max(t_begin, max(int64_t{0}, len - window) / kBK * kBK);
  };
  const int64_t n = n_first + warp / G;
  int64_t row = -1, t_begin = 0, t_end = 0;
  range(n, row, t_begin, t_end);
  float* my_part = row >= 0 ? part + ((n * q_heads + h) * splits + split) * static_cast<int64_t>(D + 2) : nullptr;
  const int64_t width = static_cast<int64_t>(q_heads + 2 * kv_heads) * D;
  if (row >= 0)
    for (int d = lane; d < D; d += 32) q_sh[warp * D + d] = to_f(qkv[n * width + static_cast<int64_t>(h) * D + d]) * scale;

  const T* cache_k = static_cast<const T*>(cache_k_raw);  // (read as T only when kv_dt < 0)
  const T* cache_v = static_cast<const T*>(cache_v_raw);
  auto kv_value = [&](const void* c, int64_t i) -> float {
    return kv_dt >= 0 ? load_any(c, kv_dt, i) : to_f(static_cast<const T*>(c)[i]);
  };
  const int64_t ppr = max_seq / page_size;
  const int64_t num_pages = cache_rows * ppr;
  const bool vec = kv_dt < 0 && sizeof(T) == 2 && D % 8 == 0 && reinterpret_cast<uintptr_t>(cache_k) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(cache_v) % 16 == 0;
  float m = -INFINITY, l = 0.f, acc[DCH];
#pragma unroll
  for (int c = 0; c < DCH; ++c) acc[c] = 0.f;

  for (int qi = 0; qi < Q; ++qi) {  // block-uniform: every thread reads the same rows
    int64_t r_row, lo, hi;
    range(n_first + qi, r_row, lo, hi);
    if (r_row < 0) continue;
    bool seen = false;
    for (int qj = 0; qj < qi && !seen; ++qj) seen = n_first + qj < N && rows[n_first + qj] == r_row;
    if (seen) continue;  // that row's tiles were walked already
    for (int qj = qi + 1; qj < Q; ++qj) {  // the union of the ranges of the tokens on this row
      int64_t o_row, b, e;
      range(n_first + qj, o_row, b, e);
      if (o_row != r_row || b >= e) continue;
      if (lo >= hi) {
        lo = b;
        hi = e;
      } else {
        lo = min(lo, b);
        hi = max(hi, e);
      }
    }
    const bool mine = row == r_row && t_begin < t_end;
    const int32_t* trow = table + r_row * pages;
    // Each tile: warp 0 finds its 32 keys' places in the cache once (page table, cache row,
    // physical position), then all threads load the rows from there — 16-byte vectors of 8
    // elements where D allows, else element by element.
    for (int64_t t0 = lo; t0 < hi; t0 += kBK) {  // lo: a multiple of kBK, as every t_begin
      if (threadIdx.x < kBK) {
        const int64_t t = t0 + threadIdx.x;
        int64_t at = -1;
        if (t < hi) {
          const int64_t pj = t / page_size;
          const int64_t page = pj < pages ? trow[pj] : -1;
          if (page >= 0 && page < num_pages) {
            const int64_t crow = page / ppr;
            const int64_t phys = (page - crow * ppr) * page_size + (t - pj * page_size);
            at = ((crow * kv_heads + kvh) * max_seq + phys) * D;
          }
        }
        key_at[threadIdx.x] = at;
      }
      __syncthreads();
      if (vec) {
        const int per_row = D / 8;
        for (int i = threadIdx.x; i < kBK * per_row; i += blockDim.x) {
          const int j = i / per_row, d0 = (i - j * per_row) * 8;
          const int64_t at = key_at[j];
          uint4 kr = make_uint4(0, 0, 0, 0), vr = make_uint4(0, 0, 0, 0);
          if (at >= 0) {
            kr = *reinterpret_cast<const uint4*>(cache_k + at + d0);
            vr = *reinterpret_cast<const uint4*>(cache_v + at + d0);
          }
          const T* ke = reinterpret_cast<const T*>(&kr);
          const T* ve = reinterpret_cast<const T*>(&vr);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            k_sh[j * (D + 1) + d0 + e] = to_f(ke[e]);
            v_sh[j * D + d0 + e] = to_f(ve[e]);
          }
        }
      } else {
        for (int i = threadIdx.x; i < kBK * D; i += blockDim.x) {
          const int j = i / D, d = i - j * D;
          const int64_t at = key_at[j];
          k_sh[j * (D + 1) + d] = at >= 0 ? kv_value(cache_k_raw, at + d) : 0.f;
          v_sh[j * D + d] = at >= 0 ? kv_value(cache_v_raw, at + d) : 0.f;
        }
      }
      __syncthreads();
      if (mine && t0 >= t_begin && t0 < t_end) {  // warp-uniform: this warp's own tiles only
        const int64_t w_lo = window > 0 ? static_cast<int64_t>(positions[n]) + 1 - window : 0;
        const bool valid = key_at[lane] >= 0 && t0 + lane < t_end && t0 + lane >= w_lo;
        attend_tile<DCH>(q_sh + warp * D, k_sh, v_sh, p_sh + warp * kBK, D, valid, softcap, m, l, acc);
      }
      __syncthreads();
    }
  }

  if (row < 0) return;
  if (t_begin >= t_end) {  // an empty split
    if (lane == 0) {
      my_part[D] = -INFINITY;
      my_part[D + 1] = 0.f;
    }
    return;
  }
#pragma unroll
  for (int c = 0; c < DCH; ++c) {
    const int d = lane + 32 * c;
    if (d < D) my_part[d] = acc[c];
  }
  if (lane == 0) {
    my_part[D] = m;
    my_part[D + 1] = l;
  }
}

// ---- cache, prefetching (LINNET_CUDA_ATTENTION=prefetch, the default) -------------------------
// attend_tile on tiles kept as stored (16-bit) rather than widened to f32: lane j reads key j
// 16 bytes at a time (the K row stride is ≡ 4 words mod 32, so the eight lanes of each quarter
// warp meet eight different bank quads: no conflict), V rows are read at consecutive elements.
// The values and the order of every fmaf are attend_tile's, so the bits are too.
template <class T, int DCH>
__device__ __forceinline__ void attend_tile_raw(const float* q, const T* ks, int ldk, const T* vs, int ldv,
                                                float* p_sh, int D, bool valid, float& m, float& l,
                                                float (&acc)[DCH]) {
  const int lane = threadIdx.x & 31;
  float s = -INFINITY;
  if (valid) {
    const T* k = ks + lane * ldk;
    float dot = 0.f;
    for (int d0 = 0; d0 < D; d0 += 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(k + d0);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int i = 0; i < 8; ++i) dot = fmaf(q[d0 + i], to_f(e[i]), dot);
    }
    s = dot;
  }
  float p;
  if (!online_softmax_step(s, valid, m, l, acc, p)) return;
  p_sh[lane] = p;
  __syncwarp();
  accumulate_values<kBK>(p_sh, vs, ldv, D, acc);
  __syncwarp();
}

// attention_cache_kernel's grid, blocks, warps, ranges and arithmetic; the tiles go through two
// shared-memory buffers filled with cp.async: while the warps fold tile t, tile t + 1 (its keys
// found in the page table by the threads that copy them) is on its way. T is 16-bit and D a
// multiple of 8 (whole 16-byte vectors); ldk / ldv: the K / V row strides in elements.
template <class T, int DCH>
__global__ void __launch_bounds__(512, 2)
    attention_cache_prefetch_kernel(const T* __restrict__ qkv, int64_t N, int Q, int q_heads, int kv_heads, int D,
                                    float scale, int64_t max_seq, int64_t page_size, int64_t cache_rows,
                                    const int32_t* __restrict__ rows, const int32_t* __restrict__ positions,
                                    const int32_t* __restrict__ table, int64_t R, int64_t pages,
                                    const T* __restrict__ cache_k, const T* __restrict__ cache_v,
                                    float* __restrict__ part, int ldk, int ldv, int split_base) {
  extern __shared__ __align__(16) float smem_pf[];
  const int warps = blockDim.x >> 5, G = warps / Q;
  float* q_sh = smem_pf;              // [warps][D]
  float* p_sh = q_sh + warps * D;     // [warps][kBK]
  T* kv = reinterpret_cast<T*>(p_sh + warps * kBK);  // 16-byte aligned: D % 8 == 0
  // Buffer b's K tile at kv + b·kBK·ldk, its V tile after both K tiles (pointer arithmetic, not
  // an array of pointers: a run-time index would put the array in local memory).
  auto k_buf = [&](int b) { return kv + b * kBK * ldk; };
  auto v_buf = [&](int b) { return kv + 2 * kBK * ldk + b * kBK * ldv; };
  __shared__ int missing[2][kBK];  // a tile's keys without a page (or past the walked range)

  const int split = blockIdx.z, splits = gridDim.z;
  const int h0 = blockIdx.y * G;
  const int kvh = h0 / (q_heads / kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int h = h0 + warp % G;
  const int64_t n_first = static_cast<int64_t>(blockIdx.x) * Q;

  auto range = [&](int64_t n, int64_t& row, int64_t& t_begin, int64_t& t_end) {  // as attention_cache_kernel's
    row = n < N ? rows[n] : -1;
    if (row < 0 || row >= R) {
      row = -1;
      return;
    }
    const int64_t len = static_cast<int64_t>(positions[n]) + 1;
    const int64_t split_len = cache_split_len(len, split_base);
    t_begin = static_cast<int64_t>(split) * split_len;
    t_end = split == splits - 1 ? len : min(len, t_begin + split_len);
  };
  const int64_t n = n_first + warp / G;
  int64_t row = -1, t_begin = 0, t_end = 0;
  range(n, row, t_begin, t_end);
  float* my_part = row >= 0 ? part + ((n * q_heads + h) * splits + split) * static_cast<int64_t>(D + 2) : nullptr;
  const int64_t width = static_cast<int64_t>(q_heads + 2 * kv_heads) * D;
  if (row >= 0)
    for (int d = lane; d < D; d += 32) q_sh[warp * D + d] = to_f(qkv[n * width + static_cast<int64_t>(h) * D + d]) * scale;

  const int64_t ppr = max_seq / page_size;
  const int64_t num_pages = cache_rows * ppr;
  const int per_row = D / 8;
  float m = -INFINITY, l = 0.f, acc[DCH];
#pragma unroll
  for (int c = 0; c < DCH; ++c) acc[c] = 0.f;

  for (int qi = 0; qi < Q; ++qi) {  // block-uniform, as attention_cache_kernel
    int64_t r_row, lo, hi;
    range(n_first + qi, r_row, lo, hi);
    if (r_row < 0) continue;
    bool seen = false;
    for (int qj = 0; qj < qi && !seen; ++qj) seen = n_first + qj < N && rows[n_first + qj] == r_row;
    if (seen) continue;
    for (int qj = qi + 1; qj < Q; ++qj) {
      int64_t o_row, b, e;
      range(n_first + qj, o_row, b, e);
      if (o_row != r_row || b >= e) continue;
      if (lo >= hi) {
        lo = b;
        hi = e;
      } else {
        lo = min(lo, b);
        hi = max(hi, e);
      }
    }
    const bool mine = row == r_row && t_begin < t_end;
    const int32_t* trow = table + r_row * pages;
    // Tile t0's keys into buffer b: each thread finds the cache place of the rows it copies.
    auto issue = [&](int64_t t0, int b) {
      for (int i = threadIdx.x; i < kBK * per_row; i += blockDim.x) {
        const int j = i / per_row, d0 = (i - j * per_row) * 8;
        const int64_t t = t0 + j;
        int64_t at = -1;
        if (t < hi) {
          const int64_t pj = t / page_size;
          const int64_t page = pj < pages ? trow[pj] : -1;
          if (page >= 0 && page < num_pages) {
            const int64_t crow = page / ppr;
            const int64_t phys = (page - crow * ppr) * page_size + (t - pj * page_size);
            at = ((crow * kv_heads + kvh) * max_seq + phys) * D;
          }
        }
        const bool ok = at >= 0;
        cp_async16(k_buf(b) + j * ldk + d0, ok ? cache_k + at + d0 : cache_k, ok);
        cp_async16(v_buf(b) + j * ldv + d0, ok ? cache_v + at + d0 : cache_v, ok);
        if (d0 == 0) missing[b][j] = ok ? 0 : 1;
      }
      cp_async_commit();
    };
    int b = 0;
    if (lo < hi) issue(lo, 0);
    for (int64_t t0 = lo; t0 < hi; t0 += kBK, b ^= 1) {  // lo: a multiple of kBK, as every t_begin
      const bool more = t0 + kBK < hi;
      if (more) issue(t0 + kBK, b ^ 1);  // that buffer was last read before the previous barrier
      if (more)
        cp_async_wait<1>();
      else
        cp_async_wait<0>();
      __syncthreads();  // tile t0 is in buffer b, for every thread
      if (mine && t0 >= t_begin && t0 < t_end) {  // warp-uniform: this warp's own tiles only
        const bool valid = !missing[b][lane] && t0 + lane < t_end;
        attend_tile_raw<T, DCH>(q_sh + warp * D, k_buf(b), ldk, v_buf(b), ldv, p_sh + warp * kBK, D, valid, m, l,
                                acc);
      }
      __syncthreads();  // buffer b is free for tile t0 + 2·kBK
    }
  }

  if (row < 0) return;
  if (t_begin >= t_end) {
    if (lane == 0) {
      my_part[D] = -INFINITY;
      my_part[D + 1] = 0.f;
    }
    return;
  }
#pragma unroll
  for (int c = 0; c < DCH; ++c) {
    const int d = lane + 32 * c;
    if (d < D) my_part[d] = acc[c];
  }
  if (lane == 0) {
    my_part[D] = m;
    my_part[D + 1] = l;
  }
}

// grid (N, q_heads), block 128: out = Σ_s e^{m_s − M} acc_s / Σ_s e^{m_s − M} l_s (with a sink,
// the denominator + e^{sink − M}).
template <class T>
__global__ void attention_combine_kernel(const float* __restrict__ part, int splits, int q_heads,
                                         int D, const int32_t* __restrict__ rows, int64_t R,
                                         T* __restrict__ out, const float* __restrict__ sinks) {
  const int h = blockIdx.y;
  const int64_t n = blockIdx.x;
  const int64_t row = rows[n];
  if (row < 0 || row >= R) return;
  const float* base = part + (n * q_heads + h) * static_cast<int64_t>(splits) * (D + 2);
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) {  // a NaN split (see attend_tile) makes M NaN, not dropped
    const float m = base[s * (D + 2) + D];
    M = isnan(m) || m > M ? m : M;
  }
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float num = 0.f, den = 0.f;
    if (isnan(M)) {
      num = den = NAN;
    } else if (M != -INFINITY) {
      for (int s = 0; s < splits; ++s) {
        const float* p = base + s * static_cast<int64_t>(D + 2);
        if (p[D] == -INFINITY) continue;
        const float w = expf(p[D] - M);
        num += w * p[d];
        den += w * p[D + 1];
      }
      if (sinks) den += expf(sinks[h] - M);
    }
    out[n * q_heads * static_cast<int64_t>(D) + static_cast<int64_t>(h) * D + d] =
        from_f<T>(den > 0.f || isnan(den) ? num / den : 0.f);
  }
}

// Head dims up to 256 (every GQA family), and latent attention's heads of qk_rope + kv_lora
// (layers/latent_attention.h): Mistral 4's 64 + 256 = 320, DeepSeek's and Kimi K2's 64 + 512 =
// 576. The kernels take D ≤ 32·DCH (each lane checks d < D), so those take DCH 10 and 18.
constexpr int kMaxHeadDim = 576;
int chunks_for(int D) {
  if (D <= 0 || D > kMaxHeadDim)
    throw Error(str("cuda attention: head_dim ", D, " is not supported (1 … ", kMaxHeadDim, ")"));
  return (D + 31) / 32;
}

// Dynamic shared memory past 48 KiB (head dims above 128) must be allowed per kernel; past what
// the GPU gives a block (227 KiB on Hopper, 163 KiB on Ampere) the launch is refused by name.
template <class K>
void allow_smem(K kernel, size_t bytes, int D) {
  if (bytes <= 48 * 1024) return;
  int device = 0, most = 0;
  LINNET_CUDA_CHECK(cudaGetDevice(&device));
  LINNET_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > static_cast<size_t>(most))
    throw Error(str("cuda attention: head_dim ", D, " needs ", bytes, " bytes of shared memory a block, more than this "
                    "GPU's ", most));
  LINNET_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// Calls f.template operator()<T, DCH>() for the run-time dtype and head-dim chunk count.
template <class F>
void dispatch(int dt, int D, F&& f) {
  const int dch = chunks_for(D);
  auto by_dch = [&](auto tag) {
    using T = decltype(tag);
    switch (dch) {
      case 1: f.template operator()<T, 1>(); break;
      case 2: f.template operator()<T, 2>(); break;
      case 3: f.template operator()<T, 3>(); break;
      case 4: f.template operator()<T, 4>(); break;
      case 5: f.template operator()<T, 5>(); break;
      case 6: f.template operator()<T, 6>(); break;
      case 7: f.template operator()<T, 7>(); break;
      case 8: f.template operator()<T, 8>(); break;
      case 9:
      case 10: f.template operator()<T, 10>(); break;  // latent attention, qk_rope 64 + kv_lora 256
      default: f.template operator()<T, 18>(); break;  // up to 576: qk_rope 64 + kv_lora 512
    }
  };
  switch (dt) {
    case kF32: by_dch(float{}); break;
    case kBF16: by_dch(__nv_bfloat16{}); break;
    case kF16: by_dch(__half{}); break;
    default: throw Error(str("cuda attention: unsupported activation dtype ",
                             dtype_name(static_cast<DType>(dt))));
  }
}

// Heads per cache-attention block: the largest divisor of the GQA group that is at most 8.
int heads_per_block(const AttnGeom& g) {
  const int group = g.q_heads / g.kv_heads;
  int G = 1;
  for (int d = 1; d <= 8 && d <= group; ++d)
    if (group % d == 0) G = d;
  return G;
}

void check_geom(const AttnGeom& g) {
  if (g.q_heads <= 0 || g.kv_heads <= 0 || g.q_heads % g.kv_heads != 0)
    throw Error(str("cuda attention: q_heads ", g.q_heads, " is not a positive multiple of kv_heads ",
                    g.kv_heads));
  chunks_for(g.head_dim);
}

}  // namespace

void launch_attention_packed(int dt, const void* qkv, int64_t N, const AttnGeom& g,
                             const int32_t* run_start, void* out, cudaStream_t s) {
  check_geom(g);
  if (N == 0) return;
  const int D = g.head_dim;
  const float scale = g.scale != 0 ? g.scale : 1.f / sqrtf(static_cast<float>(D));
  const size_t smem = sizeof(float) * (kBQ * D + kBK * (2 * D + 1) + kWarps * kBK);
  const dim3 grid(static_cast<unsigned>((N + kBQ - 1) / kBQ), static_cast<unsigned>(g.q_heads));
  dispatch(dt, D, [&]<class T, int DCH>() {
    allow_smem(attention_packed_kernel<T, DCH>, smem, D);
    attention_packed_kernel<T, DCH><<<grid, kWarps * 32, smem, s>>>(
        static_cast<const T*>(qkv), N, g.q_heads, g.kv_heads, D, scale, g.softcap, g.window, run_start,
        static_cast<T*>(out), g.kv_dt == dt ? -1 : g.kv_dt, g.sinks);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

int attention_cache_splits(int64_t span, int split_base) {
  // Enough for every length up to span: ⌈len / base⌉ up to 64·base keys, never more than 64.
  span = std::max<int64_t>(1, span);
  return static_cast<int>(std::min<int64_t>(kMaxCacheSplits, (span + split_base - 1) / split_base));
}

int64_t attention_cache_workspace(int64_t N, const AttnGeom& g, int splits) {
  return N * g.q_heads * static_cast<int64_t>(splits) * (g.head_dim + 2);
}

void launch_attention_cache(int dt, const void* qkv, int64_t N, const AttnGeom& g,
                            const int32_t* rows, const int32_t* positions, const int32_t* table,
                            int64_t R, int64_t pages, const void* cache_k, const void* cache_v,
                            void* out, float* workspace, int splits, bool prefetch, int split_base,
                            cudaStream_t s) {
  check_geom(g);
  if (N == 0) return;
  const int D = g.head_dim;
  const int G = heads_per_block(g);
  // Tokens a block: one where the call's tokens are each on a row of their own (a decode
  // step), else up to 16 warps' worth (a prefill chunk: the K/V tiles shared). Speed only.
  const int Q = g.row_run >= 2 ? std::max(1, 16 / G) : 1;
  const float scale = g.scale != 0 ? g.scale : 1.f / sqrtf(static_cast<float>(D));
  const dim3 grid(static_cast<unsigned>((N + Q - 1) / Q), static_cast<unsigned>(g.q_heads / G),
                  static_cast<unsigned>(splits));
  // The prefetching kernel knows no sliding window or soft-cap and holds head dims up to 128
  // (Llama, Mistral, Qwen); the others take the general kernel (Gemma's 256, windows, caps).
  // A cache in another dtype than the activations' (--kv-cache-dtype) takes the general kernel,
  // which reads it element by element.
  const bool any_kv = g.kv_dt >= 0 && g.kv_dt != dt;
  const bool raw = prefetch && !any_kv && dt != kF32 && D % 8 == 0 && D <= 128 && g.window == 0 && g.softcap == 0 &&
                   reinterpret_cast<uintptr_t>(cache_k) % 16 == 0 && reinterpret_cast<uintptr_t>(cache_v) % 16 == 0;
  if (raw) {
    // K rows: ≡ 4 words mod 32 (conflict-free 16-byte reads by lane j of row j); V rows: D.
    const int ldk = ((D / 2 + 31) / 32 * 32 + 4) * 2, ldv = D;
    const size_t smem = sizeof(float) * (Q * G * D + Q * G * kBK) + 2 * sizeof(__half) * kBK * (ldk + ldv);
    dispatch(dt, D, [&]<class T, int DCH>() {
      if constexpr (sizeof(T) == 2 && DCH <= 4) {
        attention_cache_prefetch_kernel<T, DCH><<<grid, Q * G * 32, smem, s>>>(
            static_cast<const T*>(qkv), N, Q, g.q_heads, g.kv_heads, D, scale, g.max_seq, g.page_size, g.cache_rows,
            rows, positions, table, R, pages, static_cast<const T*>(cache_k), static_cast<const T*>(cache_v),
            workspace, ldk, ldv, split_base);
        LINNET_CUDA_LAUNCH_CHECK();
        attention_combine_kernel<T><<<dim3(static_cast<unsigned>(N), static_cast<unsigned>(g.q_heads)), 128, 0, s>>>(
            workspace, splits, g.q_heads, D, rows, R, static_cast<T*>(out), g.sinks);
      }
    });
    LINNET_CUDA_LAUNCH_CHECK();
    return;
  }
  const size_t smem = sizeof(float) * (Q * G * D + kBK * (2 * D + 1) + Q * G * kBK);
  dispatch(dt, D, [&]<class T, int DCH>() {
    allow_smem(attention_cache_kernel<T, DCH>, smem, D);
    attention_cache_kernel<T, DCH><<<grid, Q * G * 32, smem, s>>>(
        static_cast<const T*>(qkv), N, Q, g.q_heads, g.kv_heads, D, scale, g.softcap, g.window, g.max_seq,
        g.page_size, g.cache_rows, rows, positions, table, R, pages, cache_k, cache_v, workspace, split_base,
        any_kv ? g.kv_dt : -1);
    LINNET_CUDA_LAUNCH_CHECK();
    attention_combine_kernel<T><<<dim3(static_cast<unsigned>(N), static_cast<unsigned>(g.q_heads)),
                                  128, 0, s>>>(workspace, splits, g.q_heads, D, rows, R,
                                               static_cast<T*>(out), g.sinks);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

}  // namespace linnet::cuda
