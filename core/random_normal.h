// The standard normal that random weights draw, as a function of a 64-bit key and an element
// index, header-only and host/device-neutral: the CUDA backend makes a model's random weights
// on the device with it (Backend::random_normal), straight into bf16, instead of making 16 GB
// of f32 on the host and uploading them.
//
// It is checkpoint/random_weights.cpp's draw (random_values): the element's hash
// r = SplitMix64(key ^ index), two 24-bit uniforms from r, Box–Muller in f32. random_values
// takes logf and cosf from the C library; this takes log and cos in double, rounded to f32
// (the correctly rounded f32 value), so the two agree except where the library's f32 result
// is off by one in its last bit: tests/random_normal_test.cpp checks that on the host.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LINNET_RN_HD __host__ __device__ __forceinline__
#else
#define LINNET_RN_HD inline
#endif

namespace linnet::random_normal {

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mix.
LINNET_RN_HD uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// f32 products and sums rounded once each, whatever the compiler would contract.
LINNET_RN_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
LINNET_RN_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
LINNET_RN_HD float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// Element `index` of the tensor whose key is `key`: a standard normal in f32.
LINNET_RN_HD float normal(uint64_t key, uint64_t index) {
  const uint64_t r = splitmix64(key ^ index);
  const float u1 = (static_cast<float>(r >> 40) + 0.5f) * 0x1p-24f;
  const float u2 = (static_cast<float>(r & 0xffffff) + 0.5f) * 0x1p-24f;
  const float lg = static_cast<float>(log(static_cast<double>(u1)));
  const float radius = sqrt_rn(mul_rn(-2.0f, lg));
  const float angle = mul_rn(6.28318530717958647692f, u2);
  return mul_rn(radius, static_cast<float>(cos(static_cast<double>(angle))));
}

// mean + scale · normal(key, index), as random_values rounds it.
LINNET_RN_HD float value(uint64_t key, uint64_t index, float mean, float scale) {
  return add_rn(mean, mul_rn(scale, normal(key, index)));
}

}  // namespace linnet::random_normal
