// Shared pieces of the CUDA backend: error checks that throw linnet::Error, element loads
// and stores by dtype, warp reductions. Only .cu files include this (it pulls in CUDA headers).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

#ifdef LINNET_HAVE_NCCL
#include <nccl.h>
#endif

namespace linnet::cuda {

[[noreturn]] void cuda_failed(cudaError_t err, const char* expr, const char* file, int line);
#ifdef LINNET_HAVE_NCCL
[[noreturn]] void nccl_failed(ncclResult_t r, const char* expr, const char* file, int line);
#endif

}  // namespace linnet::cuda

#define LINNET_CUDA_CHECK(expr)                                                       \
  do {                                                                                \
    const cudaError_t linnet_err_ = (expr);                                           \
    if (linnet_err_ != cudaSuccess)                                                   \
      ::linnet::cuda::cuda_failed(linnet_err_, #expr, __FILE__, __LINE__);            \
  } while (0)

// After a kernel launch: a bad configuration shows here, at the launch site.
#define LINNET_CUDA_LAUNCH_CHECK() LINNET_CUDA_CHECK(cudaGetLastError())

#ifdef LINNET_HAVE_NCCL
#define LINNET_NCCL_CHECK(expr)                                                       \
  do {                                                                                \
    const ncclResult_t linnet_nr_ = (expr);                                           \
    if (linnet_nr_ != ncclSuccess)                                                    \
      ::linnet::cuda::nccl_failed(linnet_nr_, #expr, __FILE__, __LINE__);             \
  } while (0)
#endif

namespace linnet::cuda {

// ---- element access ----------------------------------------------------------------------
// Activation kernels are templated on the element type (float, __nv_bfloat16, __half);
// rarely-hot paths (weights of norms, logits, conversions) switch on the dtype at run time.

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }

template <class T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }

// Run-time dtype codes (the DType enum's values), usable in device code.
constexpr int kBF16 = static_cast<int>(DType::bf16);
constexpr int kF16 = static_cast<int>(DType::f16);
constexpr int kF32 = static_cast<int>(DType::f32);
constexpr int kI32 = static_cast<int>(DType::i32);
constexpr int kI64 = static_cast<int>(DType::i64);
constexpr int kF8E4M3 = static_cast<int>(DType::f8_e4m3);

// E4M3 to f32, exact (through f16, which holds every E4M3 value).
__device__ __forceinline__ float e4m3_to_f32(uint8_t b) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(b, __NV_E4M3)));
}
// f32 to E4M3: to nearest even, saturating at ±448 (infinities too), NaN stays NaN: the CPU's
// f32_to_f8_e4m3 (core/dtype.h).
__device__ __forceinline__ uint8_t f32_to_e4m3(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// compressed-tensors' dynamic scale of a row or group of x: amax / 448 (FP8) or / 127.5 (int8),
// correctly rounded, 2^-23 where amax is 0 (the CPU's cpu::round_activations).
__device__ __forceinline__ float dynamic_activation_scale(float amax, bool fp8) {
  const float s = __fdiv_rn(amax, fp8 ? 448.f : 127.5f);
  return s == 0.f ? 1.1920928955078125e-7f : s;
}

__device__ __forceinline__ float load_any(const void* p, int dt, int64_t i) {
  switch (dt) {
    case kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case kF16: return __half2float(static_cast<const __half*>(p)[i]);
    case kF32: return static_cast<const float*>(p)[i];
    case kI32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    case kF8E4M3: return e4m3_to_f32(static_cast<const uint8_t*>(p)[i]);
    default: return static_cast<float>(static_cast<const int64_t*>(p)[i]);
  }
}

__device__ __forceinline__ void store_any(void* p, int dt, int64_t i, float v) {
  switch (dt) {
    case kBF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case kF16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case kF32: static_cast<float*>(p)[i] = v; break;
    case kI32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case kF8E4M3: static_cast<uint8_t*>(p)[i] = f32_to_e4m3(v); break;
    default: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
  }
}

// x rounded through float dtype dt and back (the CPU's round_to): how a KV cache of dtype dt
// holds it. f32 (or any other code): x itself.
__device__ __forceinline__ float round_through(int dt, float x) {
  switch (dt) {
    case kBF16: return __bfloat162float(__float2bfloat16_rn(x));
    case kF16: return __half2float(__float2half_rn(x));
    case kF8E4M3: return e4m3_to_f32(f32_to_e4m3(x));
    default: return x;
  }
}

// ---- reductions ----------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024). Every thread gets the sum.
// `scratch` holds 32 floats; the call ends with a barrier so scratch may be reused.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : 0.f;
  t = warp_sum(t);
  __syncthreads();
  return t;
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : -INFINITY;
  t = warp_max(t);
  __syncthreads();
  return t;
}

// ---- asynchronous copies to shared memory (sm_80+) ---------------------------------------------
// 16 bytes from global to shared memory without passing through registers; with valid false
// the 16 bytes are zeros and nothing is read (gmem must still be a mapped address: callers
// pass the tensor's base). Completed in groups: commit, then wait until at most N are pending.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

inline unsigned blocks_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535LL * 1024) b = 65535LL * 1024;  // grid-stride loops cover the rest
  return static_cast<unsigned>(b);
}

}  // namespace linnet::cuda
