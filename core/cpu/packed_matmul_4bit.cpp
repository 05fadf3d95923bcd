// The products of 4-bit weights read as stored (core/cpu/packed_matmul.h): integers with group
// scales and zero points (int4) and MXFP4's E2M1 values with E8M0 block scales. Each step's 32
// weights widen from 16 bytes to f32 exactly as the format's dequantization computes them
// (int4: (q − zero) · scale, one f32 rounding; MXFP4: e2m1(q) · 2^(e − 127), exact); then the
// f32 path's multiply-adds (packed_quantized.h): the bits of the dense product on the
// dequantized matrix.
#include <cstring>

#include "core/cpu/packed_quantized.h"

namespace linnet::cpu {

namespace {

using quantized::ceil_div;
using quantized::nibble_scales_offset;
using quantized::nibble_zeros_offset;
size_t scales_offset(int64_t padded_rows, int64_t cols) { return nibble_scales_offset(padded_rows, cols); }
size_t zeros_offset(int64_t padded_rows, int64_t cols, int64_t block_cols) {
  return nibble_zeros_offset(padded_rows, cols, block_cols);
}

// int4 as a format of packed_quantized.h. A panel's step t is 16 bytes: byte j holds row j in
// its low nibble and row j + 16 in its high one, so one zero-extension and a mask or a shift
// give 16 rows in order. Scales [⌈k/bc⌉][32] f32 and zero points [⌈k/bc⌉][32] u8 per panel.
struct Int4 {
  using Panel = quantized::Int4Panel;
  static size_t panel_bytes(int64_t k) { return static_cast<size_t>(kPanel / 2 * k); }
  static Panel panel(const void* w, int64_t padded_rows, int64_t k, int64_t block_cols, int64_t p) {
    return quantized::int4_panel(w, padded_rows, k, block_cols, p);
  }
  static float weight(const Panel& p, int64_t t, int64_t c) {
    const uint8_t byte = p.q[t * (kPanel / 2) + (c & 15)];
    const int u = (c < 16 ? byte : byte >> 4) & 15;
    const int64_t b = (t / p.block_cols) * kPanel + c;
    return (static_cast<float>(u) - static_cast<float>(p.zeros[b])) * p.scales[b];
  }

  struct Block512 {
    __m512 s_lo, s_hi, z_lo, z_hi;
  };
  __attribute__((target("avx512f,avx512bw"))) static __m512 zeros16(const uint8_t* z) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(z))));
  }
  __attribute__((target("avx512f,avx512bw"))) static Block512 block512(const Panel& p, int64_t b) {
    const float* s = p.scales + b * kPanel;
    const uint8_t* z = p.zeros + b * kPanel;
    return {_mm512_loadu_ps(s), _mm512_loadu_ps(s + 16), zeros16(z), zeros16(z + 16)};
  }
  __attribute__((target("avx512f,avx512bw"))) static void widen512(const Panel& p, int64_t t, const Block512& b,
                                                                     __m512& lo, __m512& hi) {
    const uint8_t* w = p.q + t * (kPanel / 2);
    if (cpu_prefetch()) _mm_prefetch(reinterpret_cast<const char*>(w + 2048), _MM_HINT_T0);
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
    const __m512 l = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)));
    const __m512 h = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
    lo = _mm512_mul_ps(_mm512_sub_ps(l, b.z_lo), b.s_lo);
    hi = _mm512_mul_ps(_mm512_sub_ps(h, b.z_hi), b.s_hi);
  }

  // AVX2: bytes 0…7 give rows 0…7 (low nibbles) and 16…23 (high); bytes 8…15 rows 8…15, 24…31.
  struct Block2 {
    __m256 s[4], z[4];
  };
  __attribute__((target("avx2,fma"))) static Block2 block2(const Panel& p, int64_t b) {
    Block2 out;
    for (int i = 0; i < 4; ++i) {
      out.s[i] = _mm256_loadu_ps(p.scales + b * kPanel + 8 * i);
      out.z[i] = _mm256_cvtepi32_ps(
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p.zeros + b * kPanel + 8 * i))));
    }
    return out;
  }
  __attribute__((target("avx2,fma"))) static void widen2(const Panel& p, int64_t t, const Block2& b, __m256 wv[4]) {
    const uint8_t* w = p.q + t * (kPanel / 2);
    if (cpu_prefetch()) _mm_prefetch(reinterpret_cast<const char*>(w + 2048), _MM_HINT_T0);
    for (int half = 0; half < 2; ++half) {
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 8 * half)));
      const __m256 l = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
      const __m256 h = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
      wv[half] = _mm256_mul_ps(_mm256_sub_ps(l, b.z[half]), b.s[half]);
      wv[2 + half] = _mm256_mul_ps(_mm256_sub_ps(h, b.z[2 + half]), b.s[2 + half]);
    }
  }
};

// int4 rounded to f16 after (q − zero) · scale: GPTQ's and AWQ's dequantization; to bf16:
// compressed-tensors' on a bf16 model (in its scales' dtype; on an f16 model f16 alike).
using Int4F16 = quantized::F16Rounded<Int4>;
using Int4Bf16 = quantized::Bf16Rounded<Int4>;

// MXFP4 in int4's panels of nibbles (byte j: row j low, row j + 16 high); after them, on a cache
// line, each panel's E8M0 exponents [⌈k/bc⌉][32] u8 — the file's one byte per 32 weights, no
// zero points. A nibble is E2M1: bit 3 the sign, bits 0…2 index {0, ½, 1, 1½, 2, 3, 4, 6}; the
// weight is that times 2^(e − 127), exact in f32 (E8M0's e = 0 is f32's subnormal 2^−127).
constexpr float kE2M1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
size_t mx_scales_offset(int64_t padded_rows, int64_t cols) { return scales_offset(padded_rows, cols); }

struct Mxfp4 {
  using Panel = quantized::Mxfp4Panel;
  static size_t panel_bytes(int64_t k) { return static_cast<size_t>(kPanel / 2 * k); }
  static Panel panel(const void* w, int64_t padded_rows, int64_t k, int64_t block_cols, int64_t p) {
    return quantized::mxfp4_panel(w, padded_rows, k, block_cols, p);
  }
  static float weight(const Panel& p, int64_t t, int64_t c) {
    const uint8_t byte = p.q[t * (kPanel / 2) + (c & 15)];
    return kE2M1[(c < 16 ? byte : byte >> 4) & 15] * f8_e8m0_to_f32(p.exps[(t / p.block_cols) * kPanel + c]);
  }

  // 2^(e − 127) from 8 or 16 exponents: e << 23 is the f32, but for e = 0 (2^−127, subnormal).
  __attribute__((target("avx2,fma"))) static __m256 scales8(const uint8_t* e) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e)));
    const __m256i bits = _mm256_blendv_epi8(_mm256_slli_epi32(v, 23), _mm256_set1_epi32(0x00400000),
                                            _mm256_cmpeq_epi32(v, _mm256_setzero_si256()));
    return _mm256_castsi256_ps(bits);
  }
  __attribute__((target("avx512f,avx512bw"))) static __m512 scales16(const uint8_t* e) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e)));
    const __mmask16 zero = _mm512_cmpeq_epi32_mask(v, _mm512_setzero_si512());
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(zero, _mm512_slli_epi32(v, 23), _mm512_set1_epi32(0x00400000)));
  }

  struct Block512 {
    __m512 s_lo, s_hi;
  };
  __attribute__((target("avx512f,avx512bw"))) static Block512 block512(const Panel& p, int64_t b) {
    const uint8_t* e = p.exps + b * kPanel;
    return {scales16(e), scales16(e + 16)};
  }
  __attribute__((target("avx512f,avx512bw"))) static void widen512(const Panel& p, int64_t t, const Block512& b,
                                                                     __m512& lo, __m512& hi) {
    const uint8_t* w = p.q + t * (kPanel / 2);
    if (cpu_prefetch()) _mm_prefetch(reinterpret_cast<const char*>(w + 2048), _MM_HINT_T0);
    const __m512 lut = _mm512_loadu_ps(kE2M1);
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
    // (vpermps reads the low 4 bits of each index.)
    lo = _mm512_mul_ps(_mm512_permutexvar_ps(v, lut), b.s_lo);
    hi = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut), b.s_hi);
  }

  struct Block2 {
    __m256 s[4];
  };
  __attribute__((target("avx2,fma"))) static Block2 block2(const Panel& p, int64_t b) {
    Block2 out;
    for (int i = 0; i < 4; ++i) out.s[i] = scales8(p.exps + b * kPanel + 8 * i);
    return out;
  }
  // The magnitude by vpermps (its index's low 3 bits), the sign bit 3 moved to bit 31.
  __attribute__((target("avx2,fma"))) static __m256 e2m1(__m256i u) {
    const __m256 mag = _mm256_permutevar8x32_ps(_mm256_loadu_ps(kE2M1), u);
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(u, _mm256_set1_epi32(8)), 28);
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
  }
  __attribute__((target("avx2,fma"))) static void widen2(const Panel& p, int64_t t, const Block2& b, __m256 wv[4]) {
    const uint8_t* w = p.q + t * (kPanel / 2);
    if (cpu_prefetch()) _mm_prefetch(reinterpret_cast<const char*>(w + 2048), _MM_HINT_T0);
    for (int half = 0; half < 2; ++half) {
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 8 * half)));
      wv[half] = _mm256_mul_ps(e2m1(v), b.s[half]);
      wv[2 + half] = _mm256_mul_ps(e2m1(_mm256_srli_epi32(v, 4)), b.s[2 + half]);
    }
  }
};

// Nibbles of rows × cols values (one a byte, low 4 bits) into int4's panel layout at `out`, or
// (dot) the integer dot products' (quantized::dot_nibble_byte; cols a multiple of 32).
void pack_nibbles(const uint8_t* q, int64_t rows, int64_t cols, uint8_t* out, bool dot = false) {
  const int64_t panels = ceil_div(rows, kPanel);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    uint8_t* panel = out + p * Int4::panel_bytes(cols);
    std::fill(panel, panel + Int4::panel_bytes(cols), uint8_t{0});
    const int64_t real = std::min<int64_t>(kPanel, rows - p * kPanel);  // padding rows: 0
    for (int64_t c = 0; c < real; ++c) {
      const uint8_t* in = q + (p * kPanel + c) * cols;
      for (int64_t t = 0; t < cols; ++t) {
        const size_t at = dot ? quantized::dot_nibble_byte(t, c) : static_cast<size_t>(t * (kPanel / 2) + (c & 15));
        const int shift = (dot ? t % 8 < 4 : c < 16) ? 0 : 4;
        panel[at] |= static_cast<uint8_t>((in[t] & 15) << shift);
      }
    }
  }
}

}  // namespace

size_t packed_int4_bytes(int64_t rows, int64_t cols, int64_t block_cols) {
  const int64_t padded = ceil_div(rows, kPanel) * kPanel;
  return zeros_offset(padded, cols, block_cols) + static_cast<size_t>(padded * ceil_div(cols, block_cols));
}

namespace {
void pack_int4_in(const uint8_t* q, const float* row_scales, const uint8_t* row_zeros, int64_t rows, int64_t cols,
                  int64_t block_cols, void* dst, bool dot) {
  const int64_t panels = ceil_div(rows, kPanel), padded = panels * kPanel, kb = ceil_div(cols, block_cols);
  uint8_t* out = static_cast<uint8_t*>(dst);
  float* scales = reinterpret_cast<float*>(out + scales_offset(padded, cols));
  uint8_t* zeros = out + zeros_offset(padded, cols, block_cols);
  pack_nibbles(q, rows, cols, out, dot);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    float* ps = scales + p * kb * kPanel;
    uint8_t* pz = zeros + p * kb * kPanel;
    const int64_t real = std::min<int64_t>(kPanel, rows - p * kPanel);  // padding rows: weight 0, scale 0
    std::fill(ps, ps + kb * kPanel, 0.0f);
    std::fill(pz, pz + kb * kPanel, uint8_t{0});
    for (int64_t c = 0; c < real; ++c) {
      for (int64_t b = 0; b < kb; ++b) {
        ps[b * kPanel + c] = row_scales[(p * kPanel + c) * kb + b];
        pz[b * kPanel + c] = row_zeros[(p * kPanel + c) * kb + b];
      }
    }
  }
}

}  // namespace

void pack_int4(const uint8_t* q, const float* row_scales, const uint8_t* row_zeros, int64_t rows, int64_t cols,
               int64_t block_cols, void* dst) {
  pack_int4_in(q, row_scales, row_zeros, rows, cols, block_cols, dst, false);
}
void pack_int4_dot(const uint8_t* q, const float* row_scales, const uint8_t* row_zeros, int64_t rows, int64_t cols,
                   int64_t block_cols, void* dst) {
  LINNET_CHECK(int_dot_fits(cols, block_cols), "pack_int4_dot: ", cols, " columns in groups of ", block_cols);
  pack_int4_in(q, row_scales, row_zeros, rows, cols, block_cols, dst, true);
}

void unpack_rows_int4_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                          int64_t rows, float* dst, DType dequant) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = row0 + i;
    const Int4::Panel p = Int4::panel(packed, padded_rows, cols, block_cols, r / kPanel);
    for (int64_t t = 0; t < cols; ++t)
      dst[i * cols + t] = dequant == DType::f16    ? Int4F16::weight(p, t, r % kPanel)
                          : dequant == DType::bf16 ? Int4Bf16::weight(p, t, r % kPanel)
                                                   : Int4::weight(p, t, r % kPanel);
  }
}

void packed_matmul_int4(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows, int64_t block_cols,
                        int64_t row0, int64_t o, float* out, const char* kernel, DType dequant) {
  LINNET_CHECK(dequant == DType::f32 || dequant == DType::f16 || dequant == DType::bf16,
               "packed_matmul_int4: weights rounded to ", dtype_name(dequant), " are not computed");
  if (dequant == DType::f16)
    quantized::product<Int4F16>("packed_matmul_int4", x, n, k, w, padded_rows, block_cols, row0, o, out, kernel);
  else if (dequant == DType::bf16)
    quantized::product<Int4Bf16>("packed_matmul_int4", x, n, k, w, padded_rows, block_cols, row0, o, out, kernel);
  else
    quantized::product<Int4>("packed_matmul_int4", x, n, k, w, padded_rows, block_cols, row0, o, out, kernel);
}

size_t packed_mxfp4_bytes(int64_t rows, int64_t cols, int64_t block_cols) {
  const int64_t padded = ceil_div(rows, kPanel) * kPanel;
  return mx_scales_offset(padded, cols) + static_cast<size_t>(padded * ceil_div(cols, block_cols));
}

namespace {
void pack_mxfp4_in(const uint8_t* q, const uint8_t* row_exps, int64_t rows, int64_t cols, int64_t block_cols, void* dst,
                   bool dot) {
  const int64_t panels = ceil_div(rows, kPanel), padded = panels * kPanel, kb = ceil_div(cols, block_cols);
  uint8_t* out = static_cast<uint8_t*>(dst);
  pack_nibbles(q, rows, cols, out, dot);
  uint8_t* exps = out + mx_scales_offset(padded, cols);
  std::fill(exps, exps + padded * kb, uint8_t{0});  // padding rows: value 0 (scale 2^−127)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < kb; ++b) exps[((r / kPanel) * kb + b) * kPanel + r % kPanel] = row_exps[r * kb + b];
}

}  // namespace

void pack_mxfp4(const uint8_t* q, const uint8_t* row_exps, int64_t rows, int64_t cols, int64_t block_cols, void* dst) {
  pack_mxfp4_in(q, row_exps, rows, cols, block_cols, dst, false);
}
void pack_mxfp4_dot(const uint8_t* q, const uint8_t* row_exps, int64_t rows, int64_t cols, int64_t block_cols, void* dst) {
  LINNET_CHECK(int_dot_fits(cols, block_cols), "pack_mxfp4_dot: ", cols, " columns in blocks of ", block_cols);
  pack_mxfp4_in(q, row_exps, rows, cols, block_cols, dst, true);
}

void unpack_rows_mxfp4_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                           int64_t rows, float* dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = row0 + i;
    const Mxfp4::Panel p = Mxfp4::panel(packed, padded_rows, cols, block_cols, r / kPanel);
    for (int64_t t = 0; t < cols; ++t) dst[i * cols + t] = Mxfp4::weight(p, t, r % kPanel);
  }
}

void packed_matmul_mxfp4(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows, int64_t block_cols,
                         int64_t row0, int64_t o, float* out, const char* kernel) {
  quantized::product<Mxfp4>("packed_matmul_mxfp4", x, n, k, w, padded_rows, block_cols, row0, o, out, kernel);
}

}  // namespace linnet::cpu
