#include "core/dtype.h"

#include <algorithm>
#include <array>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace linnet {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::bf16:
    case DType::f16: return 2;
    case DType::f8_e4m3:
    case DType::i8:
    case DType::u8:
    case DType::f8_e8m0: return 1;
    case DType::f32:
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f8_e4m3: return "f8_e4m3";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::f8_e8m0: return "f8_e8m0";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "bf16" || s == "BF16" || s == "bfloat16") return DType::bf16;
  if (s == "f16" || s == "F16" || s == "float16") return DType::f16;
  if (s == "f32" || s == "F32" || s == "float32") return DType::f32;
  if (s == "i32" || s == "I32" || s == "int32") return DType::i32;
  if (s == "i64" || s == "I64" || s == "int64") return DType::i64;
  if (s == "f8_e4m3" || s == "F8_E4M3" || s == "float8_e4m3fn") return DType::f8_e4m3;
  if (s == "i8" || s == "I8" || s == "int8") return DType::i8;
  if (s == "u8" || s == "U8" || s == "uint8") return DType::u8;
  if (s == "f8_e8m0" || s == "F8_E8M0" || s == "float8_e8m0fnu") return DType::f8_e8m0;
  throw Error(str("unknown dtype '", s, "' (expected bf16, f16, f32, i32, i64, f8_e4m3, i8, u8 or f8_e8m0)"));
}

bool is_float(DType t) { return t == DType::bf16 || t == DType::f16 || t == DType::f32; }

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow → inf
  if (abs < 0x38800000u) {                                               // subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);           // below half the smallest
    const uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // so the result counts units of 2^-24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {
      float f = std::ldexp(static_cast<float>(mant), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f8_e4m3_to_f32(uint8_t b) {
  const uint32_t e = (b >> 3) & 0xfu, m = b & 0x7u;
  if (e == 0xf && m == 0x7) return std::numeric_limits<float>::quiet_NaN();
  // Normal: 2^(e−7)·(1 + m/8); subnormal (e = 0): 2^−6·m/8.
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), static_cast<int>(e) - 10);
  return (b & 0x80) ? -mag : mag;
}

float f8_e8m0_to_f32(uint8_t e) {
  if (e == 0xff) return std::numeric_limits<float>::quiet_NaN();
  const uint32_t u = e == 0 ? 0x00400000u : static_cast<uint32_t>(e) << 23;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint8_t f32_to_f8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::min(std::fabs(f), 448.0f);
  // Subnormals (and 0): multiples of 2^−9, to nearest even (a · 512 is exact; 8 is code 8,
  // the smallest normal 2^−6).
  if (a < 0x1p-6f) return static_cast<uint8_t>(sign | static_cast<int>(std::nearbyint(a * 512.0f)));
  // Normals: the f32's mantissa rounded to 3 bits, ties to even (a carry moves the exponent up);
  // then E4M3's exponent bias 7 for f32's 127. 448 (0x7e) is the largest after the clamp.
  uint32_t u;
  std::memcpy(&u, &a, 4);
  u += 0x7ffffu + ((u >> 20) & 1u);
  const int code = ((static_cast<int>(u >> 23) - 120) << 3) | static_cast<int>((u >> 20) & 7u);
  return static_cast<uint8_t>(sign | std::min(code, 0x7e));
}

float round_to(DType t, float x) {
  switch (t) {
    case DType::bf16: return bf16_to_f32(f32_to_bf16(x));
    case DType::f16: return f16_to_f32(f32_to_f16(x));
    case DType::f8_e4m3: return f8_e4m3_to_f32(f32_to_f8_e4m3(x));  // saturating at ±448
    default: return x;
  }
}

namespace {
template <class Get, class Put>
void each(size_t n, Get get, Put put) {
  for (size_t i = 0; i < n; ++i) put(i, get(i));
}
double load(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::f8_e4m3: return f8_e4m3_to_f32(static_cast<const uint8_t*>(p)[i]);
    case DType::i8: return static_cast<const int8_t*>(p)[i];
    case DType::u8: return static_cast<const uint8_t*>(p)[i];
    case DType::f8_e8m0: return f8_e8m0_to_f32(static_cast<const uint8_t*>(p)[i]);
  }
  return 0;
}
void store(void* p, DType t, size_t i, double v) {
  switch (t) {
    case DType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v)); break;
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::i64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::f8_e4m3: static_cast<uint8_t*>(p)[i] = f32_to_f8_e4m3(static_cast<float>(v)); break;
    case DType::i8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DType::f8_e8m0:
      throw Error("f8_e8m0 is a storage type of scales only: nothing converts to it");
  }
}
}  // namespace

void convert(const void* src, DType st, void* dst, DType dt, size_t n) {
  if (n == 0) return;  // an empty tensor's pointers may be null (memcpy's may not)
  if (st == dt) {
    std::memcpy(dst, src, n * dtype_size(st));
    return;
  }
  // Fast paths for the conversions that weights and logits take.
  if (st == DType::bf16 && dt == DType::f32) {
    auto s = static_cast<const uint16_t*>(src);
    auto d = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
    return;
  }
  if (st == DType::f32 && dt == DType::bf16) {
    auto s = static_cast<const float*>(src);
    auto d = static_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
    return;
  }
  if (st == DType::f8_e4m3 && dt == DType::f32) {  // (a KV cache in FP8: every value by a table)
    static const auto table = [] {
      std::array<float, 256> t{};
      for (int b = 0; b < 256; ++b) t[static_cast<size_t>(b)] = f8_e4m3_to_f32(static_cast<uint8_t>(b));
      return t;
    }();
    auto s = static_cast<const uint8_t*>(src);
    auto d = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = table[s[i]];
    return;
  }
  if (st == DType::f16 && dt == DType::f32) {
    auto s = static_cast<const uint16_t*>(src);
    auto d = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = f16_to_f32(s[i]);
    return;
  }
  if (st == DType::i64 && dt == DType::i32) {
    auto s = static_cast<const int64_t*>(src);
    auto d = static_cast<int32_t*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = static_cast<int32_t>(s[i]);
    return;
  }
  each(n, [&](size_t i) { return load(src, st, i); }, [&](size_t i, double v) { store(dst, dt, i, v); });
}

namespace {
template <class Bits>
int64_t first_with_exponent(const Bits* v, int64_t count, Bits exponent) {
  // In 1 MiB pieces: the pieces run in parallel, the first piece that has one gives its index.
  constexpr int64_t kPiece = (1 << 20) / sizeof(Bits);
  const int64_t pieces = (count + kPiece - 1) / kPiece;
  int64_t found = count;
#pragma omp parallel for schedule(dynamic, 1) reduction(min : found) if (pieces > 1)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t end = std::min(count, (p + 1) * kPiece);
    bool any = false;
    for (int64_t i = p * kPiece; i < end; ++i) any |= (v[i] & exponent) == exponent;
    if (!any) continue;
    for (int64_t i = p * kPiece; i < end; ++i)
      if ((v[i] & exponent) == exponent) {
        found = std::min(found, i);
        break;
      }
  }
  return found == count ? -1 : found;
}
}  // namespace

int64_t first_non_finite(const void* data, DType t, int64_t count) {
  switch (t) {
    case DType::f32: return first_with_exponent(static_cast<const uint32_t*>(data), count, uint32_t{0x7f800000});
    case DType::bf16: return first_with_exponent(static_cast<const uint16_t*>(data), count, uint16_t{0x7f80});
    case DType::f16: return first_with_exponent(static_cast<const uint16_t*>(data), count, uint16_t{0x7c00});
    // E4M3 has no infinities; its NaN is the one pattern with every exponent and mantissa bit.
    case DType::f8_e4m3: return first_with_exponent(static_cast<const uint8_t*>(data), count, uint8_t{0x7f});
    // E8M0: 255 is NaN (there is no sign, mantissa or infinity).
    case DType::f8_e8m0: return first_with_exponent(static_cast<const uint8_t*>(data), count, uint8_t{0xff});
    default: return -1;
  }
}

}  // namespace linnet
