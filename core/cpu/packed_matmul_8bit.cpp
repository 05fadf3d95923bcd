// The products of one-byte weights read as stored (core/cpu/packed_matmul.h): FP8 E4M3 with
// block scales, and int8 with row or group scales. Each kernel widens a step's 32 bytes to f32
// in registers, exactly, times the row's block scale (one f32 rounding, as the format's own
// dequantization), then the f32 path's multiply-adds in the f32 path's chain order: the bits of
// the dense product on the dequantized matrix, whatever the rows, tile, thread or kernel.
#include "core/cpu/packed_matmul.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/cpu/packed_quantized.h"

namespace linnet::cpu {

namespace {

using quantized::ceil_div;
// Scales start on a cache line after the panels' bytes.
size_t scales_offset(int64_t padded_rows, int64_t cols) { return quantized::byte_scales_offset(padded_rows, cols); }

// One byte a weight, as a format of packed_quantized.h: a panel's bytes [k][32] and its scales
// [⌈k/bc⌉][32] f32 (FP8 and int8 differ only in how a byte widens).
struct BytePanels {
  using Panel = quantized::BytePanel;
  static size_t panel_bytes(int64_t k) { return static_cast<size_t>(kPanel * k); }
  static Panel panel(const void* w, int64_t padded_rows, int64_t k, int64_t block_cols, int64_t p) {
    return quantized::byte_panel(w, padded_rows, k, block_cols, p);
  }
  struct Block2 {
    __m256 s[4];
  };
  __attribute__((target("avx2,fma"))) static Block2 block2(const Panel& p, int64_t b) {
    Block2 out;
    for (int i = 0; i < 4; ++i) out.s[i] = _mm256_loadu_ps(p.scales + b * kPanel + 8 * i);
    return out;
  }
};

struct Fp8 : BytePanels {
  static float weight(const Panel& p, int64_t t, int64_t c) {
    return f8_e4m3_to_f32(p.q[t * kPanel + c]) * p.scales[(t / p.block_cols) * kPanel + c];
  }

  // A step's 32 bytes become 32 f16 words, each E4M3 value times 2^-8 exactly (E4M3's exponent
  // and mantissa are an f16's, 8 binades lower; its subnormals f16's): zero-extend, shift the 7
  // magnitude bits into place, move the sign from bit 14 to 15 by adding it to itself; then
  // vcvtph2ps. The block's scale is multiplied by 2^8 (exact), so each weight is again one f32
  // rounding of e4m3 · scale.
  struct Block512 {
    __m512 s_lo, s_hi;
  };
  __attribute__((target("avx512f,avx512bw"))) static Block512 block512(const Panel& p, int64_t b) {
    const float* s = p.scales + b * kPanel;
    const __m512 two8 = _mm512_set1_ps(256.0f);
    return {_mm512_mul_ps(_mm512_loadu_ps(s), two8), _mm512_mul_ps(_mm512_loadu_ps(s + 16), two8)};
  }
  __attribute__((target("avx512f,avx512bw"))) static void widen512(const Panel& p, int64_t t, const Block512& b,
                                                                     __m512& lo, __m512& hi) {
    const uint8_t* w = p.q + t * kPanel;
    if (cpu_prefetch()) _mm_prefetch(reinterpret_cast<const char*>(w + 4096), _MM_HINT_T0);
    const __m512i v = _mm512_slli_epi16(_mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))), 7);
    const __m512i h = _mm512_add_epi16(v, _mm512_and_si512(v, _mm512_set1_epi16(0x4000)));
    lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), b.s_lo);
    hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), b.s_hi);
  }

  // AVX2: the sign, then the 7 magnitude bits shifted into an f32's exponent and mantissa (an
  // f32 2^120 times too small, subnormal for E4M3's subnormals) multiplied by 2^120, exact.
  __attribute__((target("avx2,fma"))) static __m256 widen_e4m3_8(const uint8_t* bytes) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes)));
    const __m256i mag = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7f)), 20);
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
    const __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(0x1p120f));
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(f), sign));
  }
  __attribute__((target("avx2,fma"))) static void widen2(const Panel& p, int64_t t, const Block2& b, __m256 wv[4]) {
    const uint8_t* w = p.q + t * kPanel;
    if (cpu_prefetch()) _mm_prefetch(reinterpret_cast<const char*>(w + 4096), _MM_HINT_T0);
    for (int i = 0; i < 4; ++i) wv[i] = _mm256_mul_ps(widen_e4m3_8(w + 8 * i), b.s[i]);
  }
};

// int8: a byte sign-extended and converted is the integer exactly; times the scale, one f32
// rounding, as compressed-tensors' q.to(scale.dtype) * scale.
struct Int8 : BytePanels {
  static float weight(const Panel& p, int64_t t, int64_t c) {
    return static_cast<float>(static_cast<int8_t>(p.q[t * kPanel + c])) * p.scales[(t / p.block_cols) * kPanel + c];
  }
  struct Block512 {
    __m512 s_lo, s_hi;
  };
  __attribute__((target("avx512f,avx512bw"))) static Block512 block512(const Panel& p, int64_t b) {
    const float* s = p.scales + b * kPanel;
    return {_mm512_loadu_ps(s), _mm512_loadu_ps(s + 16)};
  }
  __attribute__((target("avx512f,avx512bw"))) static void widen512(const Panel& p, int64_t t, const Block512& b,
                                                                     __m512& lo, __m512& hi) {
    const uint8_t* w = p.q + t * kPanel;
    if (cpu_prefetch()) _mm_prefetch(reinterpret_cast<const char*>(w + 4096), _MM_HINT_T0);
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16));
    lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(a)), b.s_lo);
    hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c)), b.s_hi);
  }
  __attribute__((target("avx2,fma"))) static void widen2(const Panel& p, int64_t t, const Block2& b, __m256 wv[4]) {
    const uint8_t* w = p.q + t * kPanel;
    if (cpu_prefetch()) _mm_prefetch(reinterpret_cast<const char*>(w + 4096), _MM_HINT_T0);
    for (int i = 0; i < 4; ++i) {
      const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 8 * i)));
      wv[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(v), b.s[i]);
    }
  }
};

// Rounded after their dequantization: to f16, 8-bit GPTQ's ((q − 128) · scale in f16) and
// compressed-tensors' on an f16 model; to bf16, compressed-tensors' on a bf16 model (q · scale
// in the scales' dtype).
using Int8F16 = quantized::F16Rounded<Int8>;
using Int8Bf16 = quantized::Bf16Rounded<Int8>;
using Fp8F16 = quantized::F16Rounded<Fp8>;
using Fp8Bf16 = quantized::Bf16Rounded<Fp8>;

// product<F, F16, Bf16> by the dtype the weights are rounded to.
template <class F, class FF16, class FBf16>
void product_rounded(const char* name, DType dequant, const float* x, int64_t n, int64_t k, const void* w,
                     int64_t padded_rows, int64_t block_cols, int64_t row0, int64_t o, float* out, const char* kernel) {
  LINNET_CHECK(dequant == DType::f32 || dequant == DType::f16 || dequant == DType::bf16, name, ": weights rounded to ",
               dtype_name(dequant), " are not computed");
  if (dequant == DType::f16)
    quantized::product<FF16>(name, x, n, k, w, padded_rows, block_cols, row0, o, out, kernel);
  else if (dequant == DType::bf16)
    quantized::product<FBf16>(name, x, n, k, w, padded_rows, block_cols, row0, o, out, kernel);
  else
    quantized::product<F>(name, x, n, k, w, padded_rows, block_cols, row0, o, out, kernel);
}

}  // namespace

float round_to_e4m3(float v) {
  const float a = std::fabs(v);
  float r;
  if (a < 0x1p-6f) {
    r = std::nearbyint(a * 512.0f) * (1.0f / 512.0f);  // subnormals: multiples of 2^-9, exact
  } else {
    uint32_t u;
    std::memcpy(&u, &a, 4);
    u += 0x7ffffu + ((u >> 20) & 1u);  // 3 mantissa bits, ties to even
    u &= 0xfff00000u;
    std::memcpy(&r, &u, 4);
  }
  return std::copysign(r, v);
}

void round_activations(const float* x, int64_t n, int64_t k, const ActivationRounding& r, float* out,
                       const float* row_amax) {
  LINNET_CHECK(r.any() && (r.group != 0 || (r.stored && r.scale > 0)), "round_activations: no rounding given");
  LINNET_CHECK(!row_amax || r.group < 0, "round_activations: a row's amax given for groups of ", r.group);
  const int64_t g = r.group > 0 ? r.group : k;
  const bool fp8 = r.format == ActivationFormat::fp8;
  // compressed-tensors' symmetric scale: amax over half the range (448 - -448, 127 - -128).
  const float half_range = fp8 ? 448.0f : 127.5f;
#pragma omp parallel for if (n * k > 65536)
  for (int64_t row = 0; row < n; ++row)
    for (int64_t c0 = 0; c0 < k; c0 += g) {
      const int64_t c1 = std::min(k, c0 + g);
      const float* in = x + row * k;
      float s = r.scale;  // static: the checkpoint's scale, whatever the row holds
      if (!r.stored) {
        float amax = 0;
        if (row_amax) amax = row_amax[row];
        else
          for (int64_t c = c0; c < c1; ++c) amax = std::isnan(in[c]) || std::isnan(amax) ? NAN : std::max(amax, std::fabs(in[c]));
        s = amax / half_range;
        if (s == 0) s = std::numeric_limits<float>::epsilon();
      }
      for (int64_t c = c0; c < c1; ++c) {
        const float q = in[c] / s;
        // (nearbyint: the default rounding mode, to nearest even, as torch.round)
        out[row * k + c] = std::isnan(q) ? q
                           : fp8         ? round_to_e4m3(std::clamp(q, -448.0f, 448.0f)) * s
                                         : std::nearbyint(std::clamp(q, -128.0f, 127.0f)) * s;
      }
    }
}

size_t packed_fp8_bytes(int64_t rows, int64_t cols, int64_t block_cols) {
  const int64_t padded = ceil_div(rows, kPanel) * kPanel;
  return scales_offset(padded, cols) + static_cast<size_t>(padded * ceil_div(cols, block_cols)) * sizeof(float);
}

namespace {
// dot: the integer dot products' layout (quantized::dot_byte; cols whole blocks of 32).
void pack_bytes_in(const uint8_t* q, const float* row_scales, int64_t rows, int64_t cols, int64_t block_cols, void* dst,
                   bool dot) {
  const int64_t panels = ceil_div(rows, kPanel), padded = panels * kPanel, kb = ceil_div(cols, block_cols);
  uint8_t* out = static_cast<uint8_t*>(dst);
  float* scales = reinterpret_cast<float*>(out + scales_offset(padded, cols));
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    uint8_t* panel = out + p * kPanel * cols;
    float* ps = scales + p * kb * kPanel;
    const int64_t real = std::min<int64_t>(kPanel, rows - p * kPanel);  // padding rows: weight 0, scale 0
    std::fill(panel, panel + kPanel * cols, uint8_t{0});
    std::fill(ps, ps + kb * kPanel, 0.0f);
    for (int64_t c = 0; c < real; ++c) {
      const uint8_t* in = q + (p * kPanel + c) * cols;
      for (int64_t t = 0; t < cols; ++t) panel[dot ? quantized::dot_byte(t, c) : static_cast<size_t>(t * kPanel + c)] = in[t];
      for (int64_t b = 0; b < kb; ++b) ps[b * kPanel + c] = row_scales[(p * kPanel + c) * kb + b];
    }
  }
}
}  // namespace

void pack_fp8(const uint8_t* q, const float* row_scales, int64_t rows, int64_t cols, int64_t block_cols, void* dst) {
  pack_bytes_in(q, row_scales, rows, cols, block_cols, dst, false);
}
void pack_int8_dot(const int8_t* q, const float* row_scales, int64_t rows, int64_t cols, int64_t block_cols, void* dst) {
  LINNET_CHECK(int_dot_fits(cols, block_cols), "pack_int8_dot: ", cols, " columns in groups of ", block_cols);
  pack_bytes_in(reinterpret_cast<const uint8_t*>(q), row_scales, rows, cols, block_cols, dst, true);
}

namespace {
template <class F>
void unpack_rows_f32_as(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                        int64_t rows, float* dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = row0 + i;
    const typename F::Panel p = F::panel(packed, padded_rows, cols, block_cols, r / kPanel);
    for (int64_t t = 0; t < cols; ++t) dst[i * cols + t] = F::weight(p, t, r % kPanel);
  }
}
}  // namespace

void unpack_rows_fp8_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                         int64_t rows, float* dst, DType dequant) {
  if (dequant == DType::f16) unpack_rows_f32_as<Fp8F16>(packed, padded_rows, cols, block_cols, row0, rows, dst);
  else if (dequant == DType::bf16) unpack_rows_f32_as<Fp8Bf16>(packed, padded_rows, cols, block_cols, row0, rows, dst);
  else unpack_rows_f32_as<Fp8>(packed, padded_rows, cols, block_cols, row0, rows, dst);
}
void unpack_rows_int8_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                          int64_t rows, float* dst, DType dequant) {
  if (dequant == DType::f16) unpack_rows_f32_as<Int8F16>(packed, padded_rows, cols, block_cols, row0, rows, dst);
  else if (dequant == DType::bf16) unpack_rows_f32_as<Int8Bf16>(packed, padded_rows, cols, block_cols, row0, rows, dst);
  else unpack_rows_f32_as<Int8>(packed, padded_rows, cols, block_cols, row0, rows, dst);
}

void packed_matmul_fp8(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows, int64_t block_cols,
                       int64_t row0, int64_t o, float* out, const char* kernel, DType dequant) {
  product_rounded<Fp8, Fp8F16, Fp8Bf16>("packed_matmul_fp8", dequant, x, n, k, w, padded_rows, block_cols, row0, o, out,
                                        kernel);
}
void packed_matmul_int8(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows, int64_t block_cols,
                        int64_t row0, int64_t o, float* out, const char* kernel, DType dequant) {
  product_rounded<Int8, Int8F16, Int8Bf16>("packed_matmul_int8", dequant, x, n, k, w, padded_rows, block_cols, row0, o,
                                           out, kernel);
}

}  // namespace linnet::cpu
