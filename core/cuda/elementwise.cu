// Row-wise and element-wise kernels: conversion, embedding, RMS norm (plain and fused with the
// residual add), add, RoPE, SwiGLU, the matmul bias, row gathers, column copies, KV writes.
#include <cuda_fp8.h>

#include <cmath>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/kernels.cuh"

namespace linnet::cuda {
namespace {

constexpr int kThreads = 256;

// Calls f.template operator()<T>() for an activation dtype.
template <class F>
void by_act(int dt, const char* op, F&& f) {
  switch (dt) {
    case kF32: f.template operator()<float>(); break;
    case kBF16: f.template operator()<__nv_bfloat16>(); break;
    case kF16: f.template operator()<__half>(); break;
    default:
      throw Error(str("cuda ", op, ": unsupported activation dtype ",
                      dtype_name(static_cast<DType>(dt))));
  }
}

__global__ void convert_kernel(const void* src, int sdt, void* dst, int ddt, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (ddt == kI32 && sdt == kI64)
      static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(static_cast<const int64_t*>(src)[i]);
    else if (ddt == kI64 && sdt == kI32)
      static_cast<int64_t*>(dst)[i] = static_cast<const int32_t*>(src)[i];
    else
      store_any(dst, ddt, i, load_any(src, sdt, i));
  }
}

__global__ void embedding_kernel(const void* weight, int wdt, int64_t V, const int32_t* ids,
                                 void* out, int odt, int64_t W) {
  const int64_t n = blockIdx.x;
  const int64_t id = ids[n];
  for (int64_t w = threadIdx.x; w < W; w += blockDim.x) {
    const float v = (id >= 0 && id < V) ? load_any(weight, wdt, id * W + w) : 0.f;
    store_any(out, odt, n * W + w, v);
  }
}

// One block per row. With delta: x += delta (rounded to T and stored), then the norm of the
// rounded sum. Sum of squares in f32.
template <class T>
__global__ void rms_norm_kernel(T* x, const T* delta, const void* w, int wdt, float eps, T* out,
                                int64_t W) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * W;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < W; i += blockDim.x) {
    float v = to_f(x[base + i]);
    if (delta) {
      const T r = from_f<T>(v + to_f(delta[base + i]));
      x[base + i] = r;
      v = to_f(r);
    }
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss, scratch);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(W) + eps);
  for (int64_t i = threadIdx.x; i < W; i += blockDim.x)
    out[base + i] = from_f<T>(to_f(x[base + i]) * inv * load_any(w, wdt, i));
}

template <class T>
__global__ void add_kernel(T* x, const T* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = from_f<T>(to_f(x[i]) + to_f(y[i]));
}

// One thread per (token, head, pair i < R/2), R = 2·half the rotary columns of a head of D.
// The angle is an f32 product, as the CPU forms it; cos and sin are taken in double and
// rounded, so they are the correctly rounded f32 values (no fast-math approximation, whatever
// the size of the angle), then × scale in f32. inv_freq: [half], or [N, half] (per_token).
template <class T>
__global__ void rope_kernel(T* x, int64_t N, int64_t W, int64_t head_begin, int64_t heads,
                            int64_t D, int64_t half, const int32_t* positions, const void* inv_freq, int ifdt,
                            bool per_token, float scale) {
  const int64_t total = N * heads * half;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t h = (idx / half) % heads;
    const int64_t n = idx / (half * heads);
    const float ang = static_cast<float>(positions[n]) * load_any(inv_freq, ifdt, per_token ? n * half + i : i);
    double sd, cd;
    sincos(static_cast<double>(ang), &sd, &cd);
    float s = static_cast<float>(sd), c = static_cast<float>(cd);
    if (scale != 1.f) {
      s = __fmul_rn(s, scale);
      c = __fmul_rn(c, scale);
    }
    T* p = x + n * W + (head_begin + h) * D;
    const float x1 = to_f(p[i]), x2 = to_f(p[i + half]);
    p[i] = from_f<T>(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
    p[i + half] = from_f<T>(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
  }
}

template <class T>
__global__ void swiglu_kernel(const T* gu, T* out, int64_t N, int64_t I) {
  const int64_t total = N * I;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = idx / I, i = idx - n * I;
    const float g = to_f(gu[n * 2 * I + i]);
    const float u = to_f(gu[n * 2 * I + I + i]);
    const float silu = g / (1.f + expf(-g));
    out[idx] = from_f<T>(silu * u);
  }
}

// gpt-oss's clamped SwiGLU over interleaved gate/up columns, in f32 (CpuBackend::swiglu_clamped_op).
template <class T>
__global__ void swiglu_clamped_kernel(const T* gu, T* out, int64_t N, int64_t I, float alpha, float limit) {
  const int64_t total = N * I;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = idx / I, i = idx - n * I;
    const float g = fminf(to_f(gu[n * 2 * I + 2 * i]), limit);
    const float u = fminf(fmaxf(to_f(gu[n * 2 * I + 2 * i + 1]), -limit), limit);
    const float glu = __fmul_rn(g, __fdiv_rn(1.f, __fadd_rn(1.f, expf(-__fmul_rn(g, alpha)))));
    out[idx] = from_f<T>(__fmul_rn(__fadd_rn(u, 1.f), glu));
  }
}

// PyTorch's gelu(approximate="tanh") of the gate times the up half, in f32.
template <class T>
__global__ void geglu_kernel(const T* gu, T* out, int64_t N, int64_t I) {
  const int64_t total = N * I;
  const float beta = 0.7978845608028654f, kappa = 0.044715f;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = idx / I, i = idx - n * I;
    const float g = to_f(gu[n * 2 * I + i]);
    const float u = to_f(gu[n * 2 * I + I + i]);
    const float inner = __fmul_rn(beta, __fadd_rn(g, __fmul_rn(__fmul_rn(__fmul_rn(kappa, g), g), g)));
    out[idx] = from_f<T>(0.5f * g * (1.f + tanhf(inner)) * u);
  }
}

// op 0: x·v, 1: x / v, 2: v·tanh(x / v).
template <class T>
__global__ void pointwise_kernel(T* x, int64_t n, int op, float v) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float a = to_f(x[i]);
    x[i] = from_f<T>(op == 0 ? __fmul_rn(a, v) : op == 1 ? __fdiv_rn(a, v) : __fmul_rn(tanhf(__fdiv_rn(a, v)), v));
  }
}

// One thread per value: sigmoid(gate) rounded to T (torch's sigmoid in T), then the product.
template <class T>
__global__ void sigmoid_mul_kernel(T* x, const T* gate, int64_t N, int64_t W, int64_t G) {
  const int64_t total = N * W, per = W / G;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / W, j = i - n * W;
    const float s = to_f(from_f<T>(__fdiv_rn(1.f, __fadd_rn(1.f, expf(-to_f(gate[n * G + j / per]))))));
    x[i] = from_f<T>(__fmul_rn(to_f(x[i]), s));
  }
}

// One thread per value: x[n, c0 + c] · f(positions[n]), f rounded to T first (the reference
// multiplies the query by the factor in its dtype).
template <class T>
__global__ void scale_by_position_kernel(T* x, int64_t N, int64_t W, int64_t c0, int64_t cols,
                                         const int32_t* positions, float beta, float period) {
  const int64_t total = N * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / cols, c = i - n * cols;
    const int32_t pos = positions[n];
    if (pos < 0) continue;
    const float f = to_f(from_f<T>(__fadd_rn(1.f, __fmul_rn(beta, logf(__fadd_rn(1.f, floorf(__fdiv_rn(static_cast<float>(pos), period))))))));
    T* a = x + n * W + c0 + c;
    *a = from_f<T>(__fmul_rn(to_f(*a), f));
  }
}

// One block per row: the sum of squares of columns [c0, c0 + cols), in f32.
template <class T>
__global__ void sum_squares_kernel(const T* x, int64_t W, int64_t c0, int64_t cols, float* out) {
  __shared__ float scratch[32];
  const T* row = x + blockIdx.x * W + c0;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = to_f(row[i]);
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = ss;
}

// One block per row: max |x| over the row (NaN where it has one: fmaxf would drop it).
template <class T>
__global__ void row_amax_kernel(const T* x, int64_t W, float* out) {
  __shared__ float scratch[32];
  __shared__ int any_nan;
  if (threadIdx.x == 0) any_nan = 0;
  __syncthreads();
  const T* row = x + blockIdx.x * W;
  float m = 0.f;
  for (int64_t i = threadIdx.x; i < W; i += blockDim.x) {
    const float v = to_f(row[i]);
    if (isnan(v)) any_nan = 1;
    m = fmaxf(m, fabsf(v));
  }
  m = block_max(m, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = any_nan ? NAN : m;
}

// One block per (row, group of `group` columns): compressed-tensors' dynamic rounding of x (the
// CPU's cpu::round_activations): s = amax / 448 or / 127.5 (2^-23 where 0), then e4m3(clamp(x /
// s, ±448)) · s or rint(clamp(x / s, −128, 127)) · s, correctly rounded division and products.
template <class T>
__global__ void round_activations_kernel(const T* x, int64_t W, int64_t group, int64_t groups, bool fp8,
                                         const float* row_amax, float static_scale, T* out) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x / groups, c0 = (blockIdx.x % groups) * group, c1 = min(W, c0 + group);
  const T* in = x + r * W;
  // Static: the checkpoint's input_scale (one value for the launch, so every thread of the block
  // takes the same branch around block_max's barriers).
  float s = static_scale;
  if (static_scale <= 0.f) {
    float amax;
    if (row_amax) {
      amax = row_amax[r];
    } else {
      float m = 0.f;
      for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) m = fmaxf(m, fabsf(to_f(in[c])));
      amax = block_max(m, scratch);
    }
    s = dynamic_activation_scale(amax, fp8);
  }
  for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
    const float q = __fdiv_rn(to_f(in[c]), s);
    float v;
    if (isnan(q)) {
      v = q;
    } else if (fp8) {
      const __nv_fp8_storage_t b = __nv_cvt_float_to_fp8(fminf(fmaxf(q, -448.f), 448.f), __NV_SATFINITE, __NV_E4M3);
      v = __half2float(__half(__nv_cvt_fp8_to_halfraw(b, __NV_E4M3)));
    } else {
      v = rintf(fminf(fmaxf(q, -128.f), 127.f));
    }
    out[r * W + c] = from_f<T>(__fmul_rn(v, s));
  }
}

// One block per (row, group): x · rsqrt(ss / count + eps) · w over the group's width columns,
// ss its own sum of squares or the given one.
template <class T>
__global__ void rms_norm_cols_kernel(T* x, int64_t W, int64_t c0, int64_t groups, int64_t width, const void* w,
                                     int wdt, float eps, const float* sum_sq, int64_t count) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x / groups, g = blockIdx.x % groups;
  T* v = x + r * W + c0 + g * width;
  float ss = 0.f;
  if (sum_sq) {
    ss = sum_sq[r * groups + g];
  } else {
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
      const float a = to_f(v[i]);
      ss = fmaf(a, a, ss);
    }
    ss = block_sum(ss, scratch);
    count = width;
  }
  const float inv = 1.f / sqrtf(ss / static_cast<float>(count) + eps);
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) v[i] = from_f<T>(to_f(v[i]) * inv * load_any(w, wdt, i));
}

// Copies in units of U (the widest of 16, 8, 4, 2, 1 bytes that divides the row).
template <class U>
__global__ void gather_rows_kernel(const U* src, int64_t src_rows, const int32_t* index, U* out,
                                   int64_t units) {
  const int64_t m = blockIdx.x;
  const int64_t r = index[m];
  const bool ok = r >= 0 && r < src_rows;
  for (int64_t i = threadIdx.x; i < units; i += blockDim.x) {
    if (ok) {
      out[m * units + i] = src[r * units + i];
    } else {
      U z;
      memset(&z, 0, sizeof(U));
      out[m * units + i] = z;
    }
  }
}

__global__ void copy_columns_kernel(const void* src, int sdt, int64_t sw, void* dst, int ddt,
                                    int64_t dw, int64_t R, int64_t col_begin, int64_t cols) {
  const int64_t total = R * cols;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / cols, c = idx - r * cols;
    store_any(dst, ddt, r * dw + col_begin + c, load_any(src, sdt, r * sw + c));
  }
}

// One thread per (row, head, value): a copy of E-byte elements, no conversion.
template <class E>
__global__ void copy_heads_kernel(const E* src, int64_t sw, E* dst, int64_t dw, int64_t R, int64_t src_begin,
                                  int64_t src_stride, int64_t step, int64_t dst_begin, int64_t dst_stride,
                                  int64_t heads, int64_t width, bool src_blocks, bool dst_blocks) {
  const int64_t per_row = heads * width, total = R * per_row;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / per_row, hj = idx - r * per_row, h = hj / width, j = hj - h * width;
    const int64_t sr = src_blocks ? h * R + r : r, dr = dst_blocks ? h * R + r : r;
    dst[dr * dw + dst_begin + h * dst_stride + j] = src[sr * sw + src_begin + h * src_stride + j * step];
  }
}

// One thread per (token, kv head, dim); k and v together. kv_dt < 0: the cache holds T;
// else that dtype (a narrower cache, or f32 beside 16-bit activations), rounded to nearest even
// (FP8 saturating) as the CPU's kv_write rounds.
template <class T>
__global__ void kv_write_kernel(const T* qkv, int64_t N, int q_heads, int kv_heads, int D,
                                int64_t max_seq, int64_t page_size, int64_t cache_rows,
                                const int32_t* slots, void* ck, void* cv, int kv_dt) {
  const int64_t per_token = static_cast<int64_t>(kv_heads) * D;
  const int64_t total = N * per_token;
  const int64_t width = static_cast<int64_t>(q_heads + 2 * kv_heads) * D;
  const int64_t ppr = max_seq / page_size;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = idx / per_token, e = idx - n * per_token;
    const int64_t slot = slots[n];
    if (slot < 0) continue;
    const int64_t page = slot / page_size;
    const int64_t crow = page / ppr;
    if (crow >= cache_rows) continue;  // out of range: the caller validates; never write past
    const int64_t pos = (page - crow * ppr) * page_size + slot % page_size;
    const int64_t j = e / D, d = e - j * D;
    const int64_t at = ((crow * kv_heads + j) * max_seq + pos) * D + d;
    const T k = qkv[n * width + static_cast<int64_t>(q_heads) * D + e];
    const T v = qkv[n * width + static_cast<int64_t>(q_heads + kv_heads) * D + e];
    if (kv_dt < 0) {
      static_cast<T*>(ck)[at] = k;
      static_cast<T*>(cv)[at] = v;
    } else {
      store_any(ck, kv_dt, at, to_f(k));
      store_any(cv, kv_dt, at, to_f(v));
    }
  }
}

}  // namespace

void launch_convert(const void* src, int sdt, void* dst, int ddt, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  convert_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(src, sdt, dst, ddt, n);
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_embedding(const void* weight, int wdt, int64_t V, const int32_t* ids, void* out,
                      int odt, int64_t N, int64_t W, cudaStream_t s) {
  if (N == 0) return;
  embedding_kernel<<<static_cast<unsigned>(N), kThreads, 0, s>>>(weight, wdt, V, ids, out, odt, W);
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_rms_norm(int dt, void* x, const void* delta, const void* w, int wdt, float eps,
                     void* out, int64_t N, int64_t W, cudaStream_t s) {
  if (N == 0) return;
  const int threads = W >= 2048 ? 512 : (W >= 512 ? 256 : 128);
  by_act(dt, "rms_norm", [&]<class T>() {
    rms_norm_kernel<T><<<static_cast<unsigned>(N), threads, 0, s>>>(
        static_cast<T*>(x), static_cast<const T*>(delta), w, wdt, eps, static_cast<T*>(out), W);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_add(int dt, void* x, const void* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  by_act(dt, "add", [&]<class T>() {
    add_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, s>>>(static_cast<T*>(x),
                                                              static_cast<const T*>(y), n);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_rope(int dt, void* x, int64_t N, int64_t W, int64_t head_begin, int64_t heads,
                 int64_t D, int64_t half, const int32_t* positions, const void* inv_freq, int ifdt,
                 bool per_token, float scale, cudaStream_t s) {
  const int64_t total = N * heads * half;
  if (total == 0) return;
  by_act(dt, "rope", [&]<class T>() {
    rope_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, s>>>(
        static_cast<T*>(x), N, W, head_begin, heads, D, half, positions, inv_freq, ifdt, per_token, scale);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_swiglu(int dt, const void* gate_up, void* out, int64_t N, int64_t I, cudaStream_t s) {
  if (N * I == 0) return;
  by_act(dt, "swiglu", [&]<class T>() {
    swiglu_kernel<T><<<blocks_for(N * I, kThreads), kThreads, 0, s>>>(
        static_cast<const T*>(gate_up), static_cast<T*>(out), N, I);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_swiglu_clamped(int dt, const void* gate_up, void* out, int64_t N, int64_t I, float alpha, float limit,
                           cudaStream_t s) {
  if (N * I == 0) return;
  by_act(dt, "swiglu_clamped", [&]<class T>() {
    swiglu_clamped_kernel<T><<<blocks_for(N * I, kThreads), kThreads, 0, s>>>(
        static_cast<const T*>(gate_up), static_cast<T*>(out), N, I, alpha, limit);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_geglu(int dt, const void* gate_up, void* out, int64_t N, int64_t I, cudaStream_t s) {
  if (N * I == 0) return;
  by_act(dt, "geglu", [&]<class T>() {
    geglu_kernel<T><<<blocks_for(N * I, kThreads), kThreads, 0, s>>>(
        static_cast<const T*>(gate_up), static_cast<T*>(out), N, I);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_pointwise(int dt, void* x, int64_t n, int op, float value, cudaStream_t s) {
  if (n == 0) return;
  by_act(dt, "pointwise", [&]<class T>() {
    pointwise_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, s>>>(static_cast<T*>(x), n, op, value);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_sigmoid_mul(int dt, void* x, const void* gate, int64_t N, int64_t W, int64_t G, cudaStream_t s) {
  if (N * W == 0) return;
  by_act(dt, "sigmoid_mul", [&]<class T>() {
    sigmoid_mul_kernel<T><<<blocks_for(N * W, kThreads), kThreads, 0, s>>>(static_cast<T*>(x),
                                                                          static_cast<const T*>(gate), N, W, G);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_scale_by_position(int dt, void* x, int64_t N, int64_t W, int64_t c0, int64_t cols, const int32_t* positions,
                              float beta, int64_t period, cudaStream_t s) {
  if (N * cols == 0) return;
  by_act(dt, "scale_by_position", [&]<class T>() {
    scale_by_position_kernel<T><<<blocks_for(N * cols, kThreads), kThreads, 0, s>>>(
        static_cast<T*>(x), N, W, c0, cols, positions, beta, static_cast<float>(period));
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_sum_squares(int dt, const void* x, int64_t N, int64_t W, int64_t c0, int64_t cols, float* out,
                        cudaStream_t s) {
  if (N == 0) return;
  by_act(dt, "sum_squares", [&]<class T>() {
    sum_squares_kernel<T><<<static_cast<unsigned>(N), 128, 0, s>>>(static_cast<const T*>(x), W, c0, cols, out);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_row_amax(int dt, const void* x, int64_t N, int64_t W, float* out, cudaStream_t s) {
  if (N == 0) return;
  by_act(dt, "row_amax", [&]<class T>() {
    row_amax_kernel<T><<<static_cast<unsigned>(N), 128, 0, s>>>(static_cast<const T*>(x), W, out);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_round_activations(int dt, const void* x, int64_t N, int64_t W, bool fp8, int64_t group,
                              const float* row_amax, float static_scale, void* out, cudaStream_t s) {
  if (N == 0 || W == 0) return;
  const int64_t g = group > 0 ? group : W, groups = (W + g - 1) / g;
  by_act(dt, "round_activations", [&]<class T>() {
    round_activations_kernel<T><<<static_cast<unsigned>(N * groups), 128, 0, s>>>(
        static_cast<const T*>(x), W, g, groups, fp8, row_amax, static_scale, static_cast<T*>(out));
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_rms_norm_cols(int dt, void* x, int64_t N, int64_t W, int64_t c0, int64_t groups, int64_t width,
                          const void* w, int wdt, float eps, const float* sum_sq, int64_t count, cudaStream_t s) {
  if (N * groups == 0) return;
  by_act(dt, "rms_norm_cols", [&]<class T>() {
    rms_norm_cols_kernel<T><<<static_cast<unsigned>(N * groups), 128, 0, s>>>(static_cast<T*>(x), W, c0, groups,
                                                                              width, w, wdt, eps, sum_sq, count);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_gather_rows(const void* src, int64_t src_rows, const int32_t* index, void* out,
                        int64_t M, int64_t row_bytes, cudaStream_t s) {
  if (M == 0 || row_bytes == 0) return;
  const auto aligned = [&](int64_t a) {
    return row_bytes % a == 0 && reinterpret_cast<uintptr_t>(src) % a == 0 &&
           reinterpret_cast<uintptr_t>(out) % a == 0;
  };
  const unsigned grid = static_cast<unsigned>(M);
  if (aligned(16))
    gather_rows_kernel<<<grid, 128, 0, s>>>(static_cast<const uint4*>(src), src_rows, index,
                                            static_cast<uint4*>(out), row_bytes / 16);
  else if (aligned(4))
    gather_rows_kernel<<<grid, 128, 0, s>>>(static_cast<const uint32_t*>(src), src_rows, index,
                                            static_cast<uint32_t*>(out), row_bytes / 4);
  else if (aligned(2))
    gather_rows_kernel<<<grid, 128, 0, s>>>(static_cast<const uint16_t*>(src), src_rows, index,
                                            static_cast<uint16_t*>(out), row_bytes / 2);
  else
    gather_rows_kernel<<<grid, 128, 0, s>>>(static_cast<const uint8_t*>(src), src_rows, index,
                                            static_cast<uint8_t*>(out), row_bytes);
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_copy_columns(const void* src, int sdt, int64_t sw, void* dst, int ddt, int64_t dw,
                         int64_t R, int64_t col_begin, int64_t cols, cudaStream_t s) {
  if (R * cols == 0) return;
  copy_columns_kernel<<<blocks_for(R * cols, kThreads), kThreads, 0, s>>>(
      src, sdt, sw, dst, ddt, dw, R, col_begin, cols);
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_copy_heads(const void* src, int64_t sw, void* dst, int64_t dw, int64_t R, int64_t elem_bytes,
                       int64_t src_begin, int64_t src_stride, int64_t step, int64_t dst_begin, int64_t dst_stride,
                       int64_t heads, int64_t width, bool src_blocks, bool dst_blocks, cudaStream_t s) {
  const int64_t total = R * heads * width;
  if (total == 0) return;
  const int grid = blocks_for(total, kThreads);
  auto run = [&](auto e) {
    using E = decltype(e);
    copy_heads_kernel<E><<<grid, kThreads, 0, s>>>(static_cast<const E*>(src), sw, static_cast<E*>(dst), dw, R,
                                                   src_begin, src_stride, step, dst_begin, dst_stride, heads, width,
                                                   src_blocks, dst_blocks);
  };
  switch (elem_bytes) {
    case 1: run(uint8_t{}); break;
    case 2: run(uint16_t{}); break;
    case 4: run(uint32_t{}); break;
    default: run(uint64_t{}); break;
  }
  LINNET_CUDA_LAUNCH_CHECK();
}

void launch_kv_write(int dt, const void* qkv, int64_t N, const AttnGeom& g, const int32_t* slots,
                     void* cache_k, void* cache_v, cudaStream_t s) {
  const int64_t total = N * g.kv_heads * g.head_dim;
  if (total == 0) return;
  by_act(dt, "kv_write", [&]<class T>() {
    kv_write_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, s>>>(
        static_cast<const T*>(qkv), N, g.q_heads, g.kv_heads, g.head_dim, g.max_seq, g.page_size,
        g.cache_rows, slots, cache_k, cache_v, g.kv_dt == dt ? -1 : g.kv_dt);
  });
  LINNET_CUDA_LAUNCH_CHECK();
}

}  // namespace linnet::cuda
