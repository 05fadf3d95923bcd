// A quantized matrix's weight (r, c) as its format dequantizes it (QuantWeights, kernels.cuh),
// the same f32 value the CPU's kernels widen to (core/cpu/packed_quantized.h: one rounding,
// then f16 for GPTQ and AWQ, bf16 or f16 for compressed-tensors on such a model): the SIMT
// tile (device_blocks.cuh) reads weights through it, so matmul and grouped_matmul on a
// quantized matrix give the dense product's bits on its dequantized weights.
#pragma once
#include "core/cuda/cuda_common.cuh"
#include "core/cuda/kernels.cuh"
#include "core/weight_layout.h"

namespace linnet::cuda {

constexpr int kFp8 = static_cast<int>(WeightFormat::fp8);
constexpr int kInt4 = static_cast<int>(WeightFormat::int4);
constexpr int kInt8 = static_cast<int>(WeightFormat::int8);
constexpr int kMxfp4 = static_cast<int>(WeightFormat::mxfp4);

// E2M1 (bit 3 the sign, bits 0…2 index the magnitudes).
__device__ __forceinline__ float e2m1_to_f32(int code) {
  constexpr float kMagnitude[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float m = kMagnitude[code & 7];
  return code & 8 ? -m : m;
}
// E8M0: 2^(e − 127); e = 0 is 2^−127, f32's subnormal (the loader refuses e = 255, NaN).
__device__ __forceinline__ float e8m0_to_f32(uint8_t e) {
  return e == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(e) << 23);
}
// (E4M3: e4m3_to_f32, cuda_common.cuh.)

// F: the format (kFp8, kInt4, kInt8, kMxfp4), fixed per kernel.
template <int F>
struct QuantizedAt {
  QuantWeights m;
  __device__ __forceinline__ float operator()(int64_t r, int64_t c) const {
    const int64_t b = r * m.groups + (m.group_index ? m.group_index[c] : c / m.group);
    float w;
    if constexpr (F == kFp8) {
      w = __fmul_rn(e4m3_to_f32(m.values[r * m.cols + c]), m.scales[b]);
    } else if constexpr (F == kInt8) {
      w = __fmul_rn(static_cast<float>(static_cast<int8_t>(m.values[r * m.cols + c])), m.scales[b]);
    } else {
      const int u = (m.values[r * ((m.cols + 1) / 2) + c / 2] >> (4 * (c & 1))) & 15;
      if constexpr (F == kInt4)
        w = __fmul_rn(__fsub_rn(static_cast<float>(u), static_cast<float>(m.zeros[b])), m.scales[b]);
      else
        w = __fmul_rn(e2m1_to_f32(u), e8m0_to_f32(m.zeros[b]));
    }
    if (m.dequant == kF16) return __half2float(__float2half_rn(w));
    if (m.dequant == kBF16) return __bfloat162float(__float2bfloat16_rn(w));
    return w;
  }
};

// f<F>() for the matrix's format; throws naming it where there is no kernel.
template <class Fn>
void by_format(const QuantWeights& w, const char* op, Fn&& f) {
  switch (w.format) {
    case kFp8: f.template operator()<kFp8>(); break;
    case kInt4: f.template operator()<kInt4>(); break;
    case kInt8: f.template operator()<kInt8>(); break;
    case kMxfp4: f.template operator()<kMxfp4>(); break;
    default: throw Error(str("cuda ", op, ": no kernel for weight format ", w.format));
  }
}

}  // namespace linnet::cuda
