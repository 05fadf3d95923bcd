// Gated DeltaNet's kernels (core/backend_op_list.h): the causal convolution, the gated delta rule
// and the gated RMSNorm, each walking a row's tokens in order as the CPU does
// (core/cpu/cpu_delta_net.cpp). A thread per channel (convolution) and per state column (delta
// rule, whose columns are independent given a token's q and k), and a block row per state row
// (grid y): each walks the call's tokens and takes its own row's, in order, so the rows of a step
// (a decode of Batch rows) run side by side and a token's arithmetic is the same whatever else is
// in the call. The delta rule runs an aligned chunk of 64 tokens at once by the chunked form, in
// the CPU's phases and sums (plain FMA, shared memory; tensor cores are for later: docs/gpu.md).
#include <algorithm>

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

// The shared memory of one aligned chunk (C tokens; dk, dv the head's key and value dims), in
// floats: K [C, dk] (normalized keys), QW [C, dk] (W = T(β e^G k), later the scaled queries) —
// both with rows of dk + 1 (`ks`), so a warp reading 32 rows' r-th entries hits 32 banks —,
// A [C, C] (A then T's strict lower part, later q_i·k_m e^{G_i − G_m}), U [C, dv] (T(β v), then
// δ), and per token: the row being found, G, e^G, e^{G_last − G}, β, the queries' and keys'
// inverse norms; then C token indices.
struct ChunkSmem {
  int64_t ks;
  float *K, *QW, *A, *row, *U, *G, *eG, *to_last, *beta, *q_inv, *k_inv;
  int* idx;
  __device__ ChunkSmem(float* p, int64_t C, int64_t dk, int64_t dv)
      : ks(dk + 1), K(p), QW(K + C * ks), A(QW + C * ks), row(A + C * C), U(row + C), G(U + C * dv), eG(G + C),
        to_last(eG + C), beta(to_last + C), q_inv(beta + C), k_inv(q_inv + C), idx(reinterpret_cast<int*>(k_inv + C)) {}
  static size_t bytes(int64_t C, int64_t dk, int64_t dv) {
    return sizeof(float) * static_cast<size_t>(2 * C * (dk + 1) + C * C + C + C * dv + 6 * C) + sizeof(int) * C;
  }
};

// The inputs of value head h (query/key head j) for token t.
struct HeadInputs {
  const void* qkv;
  const void* ab;
  int dt;
  int64_t hk, dk, hv, dv, h, j, width;
  float a_h, bias, q_scale;
  __device__ int64_t q0(int64_t t) const { return t * width + j * dk; }
  __device__ int64_t k0(int64_t t) const { return t * width + hk * dk + j * dk; }
  __device__ float v(int64_t t, int64_t c) const { return load_any(qkv, dt, t * width + 2 * hk * dk + h * dv + c); }
  // transformers: beta = sigmoid(b) in the activation dtype; g in f32.
  __device__ float beta(int64_t t) const {
    return round_to(dt, __fdiv_rn(1.f, __fadd_rn(1.f, expf(-load_any(ab, dt, t * 2 * hv + h)))));
  }
  __device__ float g(int64_t t) const {
    const float x = load_any(ab, dt, t * 2 * hv + hv + h) + bias;
    return a_h * (x > 20.f ? x : log1pf(expf(x)));
  }
};

// The chunked form over the aligned chunk sm.idx[0 … C) of one head and state row (column-major
// state s: column c at s + c, stride dv), every thread of the block taking part; the CPU's phases
// and its sums in its order (core/cpu/cpu_delta_net.cpp).
__device__ void delta_rule_chunk(const HeadInputs& in, ChunkSmem& sm, int64_t C, float* s, float* states,
                                 int64_t row_stride, const int32_t* keep, void* out) {
  const int64_t tid = threadIdx.x, nt = blockDim.x, dk = in.dk, dv = in.dv, ks = sm.ks;
  for (int64_t i = tid; i < C; i += nt) {  // norms and gates, a thread a token
    const int64_t t = sm.idx[i];
    float qq = 0.f, kk = 0.f;
    for (int64_t r = 0; r < dk; ++r) {
      const float qv = load_any(in.qkv, in.dt, in.q0(t) + r), kv = load_any(in.qkv, in.dt, in.k0(t) + r);
      qq = fmaf(qv, qv, qq);
      kk = fmaf(kv, kv, kk);
    }
    sm.q_inv[i] = rsqrtf(qq + 1e-6f) * in.q_scale;
    sm.k_inv[i] = rsqrtf(kk + 1e-6f);
    sm.beta[i] = in.beta(t);
    sm.G[i] = in.g(t);
  }
  __syncthreads();
  if (tid == 0)
    for (int64_t i = 1; i < C; ++i) sm.G[i] += sm.G[i - 1];  // G: the cumulative log decay
  __syncthreads();
  for (int64_t i = tid; i < C; i += nt) {
    sm.eG[i] = expf(sm.G[i]);
    sm.to_last[i] = expf(sm.G[C - 1] - sm.G[i]);
  }
  for (int64_t e = tid; e < C * dk; e += nt)
    sm.K[e / dk * ks + e % dk] = load_any(in.qkv, in.dt, in.k0(sm.idx[e / dk]) + e % dk) * sm.k_inv[e / dk];
  __syncthreads();
  auto dot = [&](const float* a, const float* b) {
    float acc = 0.f;
    for (int64_t r = 0; r < dk; ++r) acc = fmaf(a[r], b[r], acc);
    return acc;
  };
  // A[i][m] = −β_i k_i·k_m e^{G_i − G_m} below the diagonal; then row by row, from the rows above
  // as they stand once found (transformers' loop), T's strict lower part.
  for (int64_t e = tid; e < C * C; e += nt) {
    const int64_t i = e / C, m = e % C;
    sm.A[e] = m < i ? -(sm.beta[i] * dot(sm.K + i * ks, sm.K + m * ks)) * expf(sm.G[i] - sm.G[m]) : 0.f;
  }
  __syncthreads();
  for (int64_t i = 1; i < C; ++i) {
    for (int64_t m = tid; m < i; m += nt) {
      float acc = sm.A[i * C + m];
      for (int64_t u = m + 1; u < i; ++u) acc = fmaf(sm.A[i * C + u], sm.A[u * C + m], acc);
      sm.row[m] = acc;
    }
    __syncthreads();
    for (int64_t m = tid; m < i; m += nt) sm.A[i * C + m] = sm.row[m];
    __syncthreads();
  }
  // W = T(β e^G k), U = T(β v); T's diagonal is 1.
  for (int64_t e = tid; e < C * dk; e += nt) {
    const int64_t i = e / dk, r = e % dk;
    float acc = 0.f;
    for (int64_t m = 0; m <= i; ++m)
      acc = fmaf((m == i ? 1.f : sm.A[i * C + m]) * sm.beta[m] * sm.eG[m], sm.K[m * ks + r], acc);
    sm.QW[i * ks + r] = acc;
  }
  for (int64_t e = tid; e < C * dv; e += nt) {
    const int64_t i = e / dv, c = e % dv;
    float acc = 0.f;
    for (int64_t m = 0; m <= i; ++m) acc = fmaf((m == i ? 1.f : sm.A[i * C + m]) * sm.beta[m], in.v(sm.idx[m], c), acc);
    sm.U[e] = acc;
  }
  __syncthreads();
  // δ = U − W S₀: a thread per state column, which only it reads and writes from here on.
  for (int64_t c = tid; c < dv; c += nt)
    for (int64_t i = 0; i < C; ++i) {
      float acc = sm.U[i * dv + c];
      for (int64_t r = 0; r < dk; ++r) acc = fmaf(-sm.QW[i * ks + r], s[r * dv + c], acc);
      sm.U[i * dv + c] = acc;
    }
  __syncthreads();
  for (int64_t e = tid; e < C * dk; e += nt)  // the scaled queries, where W was
    sm.QW[e / dk * ks + e % dk] = load_any(in.qkv, in.dt, in.q0(sm.idx[e / dk]) + e % dk) * sm.q_inv[e / dk];
  __syncthreads();
  for (int64_t e = tid; e < C * C; e += nt) {  // A ← q_i·k_m e^{G_i − G_m}, m ≤ i
    const int64_t i = e / C, m = e % C;
    sm.A[e] = m <= i ? dot(sm.QW + i * ks, sm.K + m * ks) * expf(sm.G[i] - sm.G[m]) : 0.f;
  }
  __syncthreads();
  for (int64_t c = tid; c < dv; c += nt) {
    for (int64_t i = 0; i < C; ++i) {  // out_i = e^{G_i} q_i S₀ + Σ_{m≤i} (q_i·k_m e^{G_i − G_m}) δ_m
      float o = 0.f;
      for (int64_t r = 0; r < dk; ++r) o = fmaf(sm.QW[i * ks + r] * sm.eG[i], s[r * dv + c], o);
      for (int64_t m = 0; m <= i; ++m) o = fmaf(sm.A[i * C + m], sm.U[m * dv + c], o);
      store_any(out, in.dt, sm.idx[i] * in.hv * dv + in.h * dv + c, o);
    }
    for (int64_t i = 0; keep && i + 1 < C; ++i) {  // a snapshot inside the chunk, before S₀ moves on
      if (keep[sm.idx[i]] < 0) continue;
      float* snap = states + keep[sm.idx[i]] * row_stride + c;
      for (int64_t r = 0; r < dk; ++r) {
        float p = s[r * dv + c] * sm.eG[i];
        for (int64_t m = 0; m <= i; ++m) p = fmaf(sm.K[m * ks + r] * expf(sm.G[i] - sm.G[m]), sm.U[m * dv + c], p);
        snap[r * dv] = p;
      }
    }
    for (int64_t r = 0; r < dk; ++r) {  // S ← e^{G_last} S₀ + Σ_m e^{G_last − G_m} k_m ⊗ δ_m
      float v = s[r * dv + c] * sm.eG[C - 1];
      for (int64_t m = 0; m < C; ++m) v = fmaf(sm.K[m * ks + r] * sm.to_last[m], sm.U[m * dv + c], v);
      s[r * dv + c] = v;
    }
    if (keep && keep[sm.idx[C - 1]] >= 0) {
      float* snap = states + keep[sm.idx[C - 1]] * row_stride + c;
      for (int64_t r = 0; r < dk; ++r) snap[r * dv] = s[r * dv + c];
    }
  }
  __syncthreads();  // the next chunk reuses the shared memory
}

// One block per (value head, state row), one thread per column of its [dk, dv] state (more
// threads take part in a chunk's phases). chunk > 0: the row's aligned chunks by the chunked form
// (positions given and the shared memory granted), every other token by the recurrent one.
__global__ void gated_delta_rule_kernel(const void* qkv, int dt, const void* ab, const void* a_log, int alog_dt,
                                        const void* dt_bias, int dtb_dt, const int32_t* rows, const int32_t* positions,
                                        const int32_t* keep, float* state, void* out, int64_t N, int64_t hk,
                                        int64_t dk, int64_t hv, int64_t dv, int64_t chunk) {
  extern __shared__ float smem[];
  const int64_t h = blockIdx.x, c = threadIdx.x, j = h / (hv / hk), width = 2 * hk * dk + hv * dv;
  const int32_t row = static_cast<int32_t>(blockIdx.y);
  const HeadInputs in{qkv, ab, dt, hk, dk, hv, dv, h, j, width, -expf(load_any(a_log, alog_dt, h)),
                      load_any(dt_bias, dtb_dt, h), rsqrtf(static_cast<float>(dk))};
  float* const s_row = state + (static_cast<int64_t>(row) * hv + h) * dk * dv;  // [dk, dv]
  ChunkSmem sm(smem, chunk, dk, dv);
  __shared__ int found;
  int64_t ran_to = -1;  // this row's tokens up to here ran in a chunk
  for (int64_t t = 0; t < N; ++t) {
    if (rows[t] != row || t <= ran_to) continue;
    if (chunk > 0 && positions[t] % chunk == 0) {  // an aligned chunk, if the row's next tokens fill it
      if (threadIdx.x == 0) {
        int count = 0;
        for (int64_t u = t; u < N && count < chunk; ++u)
          if (rows[u] == row) {
            if (positions[u] != positions[t] + count) break;
            sm.idx[count++] = static_cast<int>(u);
          }
        found = count;
      }
      __syncthreads();
      const bool whole = found == chunk;
      __syncthreads();
      if (whole) {
        delta_rule_chunk(in, sm, chunk, s_row, state + h * dk * dv, hv * dk * dv, keep, out);
        ran_to = sm.idx[chunk - 1];
        __syncthreads();
        continue;
      }
    }
    if (c >= dv) continue;
    const int64_t q0 = in.q0(t), k0 = in.k0(t);
    float qq = 0.f, kk = 0.f;
    for (int64_t r = 0; r < dk; ++r) {
      const float qv = load_any(qkv, dt, q0 + r), kv = load_any(qkv, dt, k0 + r);
      qq = fmaf(qv, qv, qq);
      kk = fmaf(kv, kv, kk);
    }
    const float q_inv = rsqrtf(qq + 1e-6f) * in.q_scale, k_inv = rsqrtf(kk + 1e-6f);
    const float beta = in.beta(t), decay = expf(in.g(t));
    float* s = s_row + c;  // column c, stride dv
    float mem = 0.f;
    for (int64_t r = 0; r < dk; ++r) {
      s[r * dv] *= decay;
      mem = fmaf(s[r * dv], load_any(qkv, dt, k0 + r) * k_inv, mem);
    }
    const float delta = (in.v(t, c) - mem) * beta;
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
                             const void* dt_bias, int dtb_dt, const int32_t* rows, const int32_t* positions,
                             const int32_t* keep, float* state, void* out, int64_t N, int64_t hk, int64_t dk,
                             int64_t hv, int64_t dv, int64_t R, int64_t chunk, cudaStream_t s) {
  if (N == 0) return;
  if (dv > 1024) throw Error(str("cuda gated_delta_rule: value heads of ", dv, " columns (at most 1024)"));
  if (R > 65535) throw Error(str("cuda gated_delta_rule: a state of ", R, " rows (at most 65535)"));
  // The chunked form where the call may hold an aligned chunk and this GPU grants its shared
  // memory (114.5 KiB for heads of 128 × 128); else every token by the recurrent form.
  size_t bytes = 0;
  if (!positions || N < chunk) chunk = 0;
  if (chunk > 0) {
    bytes = ChunkSmem::bytes(chunk, dk, dv);
    int device = 0, most = 0;
    LINNET_CUDA_CHECK(cudaGetDevice(&device));
    LINNET_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (bytes > static_cast<size_t>(most)) {
      chunk = 0;
      bytes = 0;
    } else if (bytes > 48 * 1024) {
      LINNET_CUDA_CHECK(cudaFuncSetAttribute(gated_delta_rule_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes)));
    }
  }
  const unsigned threads = static_cast<unsigned>(std::max<int64_t>(64, (dv + 31) / 32 * 32));
  const dim3 grid(static_cast<unsigned>(hv), static_cast<unsigned>(R));
  gated_delta_rule_kernel<<<grid, threads, bytes, s>>>(qkv, dt, ab, a_log, alog_dt, dt_bias, dtb_dt, rows, positions,
                                                       keep, state, out, N, hk, dk, hv, dv, chunk);
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_rms_norm_gated(const void* x, const void* z, int dt, const void* w, int w_dt, float eps, void* out,
                           int64_t groups, int64_t W, cudaStream_t s) {
  if (groups * W == 0) return;
  rms_norm_gated_kernel<<<static_cast<unsigned>(groups), 128, 0, s>>>(x, z, dt, w, w_dt, eps, out, W);
  LINNET_CUDA_LAUNCH_CHECK();
}

}  // namespace linnet::cuda
