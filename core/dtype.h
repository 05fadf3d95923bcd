// Element types and their conversions. bf16 and f16 are stored as raw 16-bit words;
// arithmetic happens in f32 (the CPU backend) after widening.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace linnet {

// f8_e4m3: OCP FP8 E4M3 "fn" (torch.float8_e4m3fn, safetensors F8_E4M3): 4 exponent bits of
// bias 7, 3 mantissa bits, no infinities, NaN at S.1111.111; max ±448. A storage type of
// quantized weights only: read, widened to f32, never written by an op.
// u8: bytes (safetensors U8): MXFP4's packed values. f8_e8m0: OCP E8M0 (torch.float8_e8m0fnu,
// safetensors F8_E8M0), a power of two 2^(e − 127), 255 = NaN: MX formats' block scales, which
// checkpoints also store as U8.
enum class DType : uint8_t { bf16, f16, f32, i32, i64, f8_e4m3, i8, u8, f8_e8m0 };

size_t dtype_size(DType t);
// The card's spelling: "bf16", "f16", "f32", "i32", "i64", "f8_e4m3", "i8", "u8", "f8_e8m0".
const char* dtype_name(DType t);
// Parses the card's spelling or safetensors' ("BF16", "F16", "F32", "I32", "I64", "F8_E4M3", "I8", "U8",
// "F8_E8M0").
// Throws linnet::Error naming the text for anything else.
DType parse_dtype(std::string_view text);
bool is_float(DType t);

// Round to nearest even; NaN stays NaN (quiet), infinities stay infinite.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// E4M3 to f32, exact (every E4M3 value is an f32); NaN stays NaN.
float f8_e4m3_to_f32(uint8_t b);
// Round to nearest even, saturating to ±448 (as torch's cast of a finite value past the
// range is not: it gives NaN; callers clamp first, as quantizers do); NaN stays NaN.
uint8_t f32_to_f8_e4m3(float f);
// E8M0 to f32: 2^(e − 127), exact (e = 0 is f32's subnormal 2^−127); 255 is NaN.
float f8_e8m0_to_f32(uint8_t e);
uint16_t f32_to_f16(float f);  // round to nearest even, overflow to infinity
float f16_to_f32(uint16_t h);

// Rounds a float through dtype t and back (identity for f32; f8_e4m3 saturates at ±448).
float round_to(DType t, float x);

// Element-wise conversion between any two dtypes (floats round, ints truncate toward zero).
void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t count);

// Index of the first NaN or ±Inf among `count` values of float dtype t, or -1 when all are
// finite (by their exponent bits: no conversion, any length in parallel).
int64_t first_non_finite(const void* data, DType t, int64_t count);

}  // namespace linnet
