// The products of quantized weights read as stored (FP8 and int8: packed_matmul_8bit.cpp; int4
// and MXFP4: packed_matmul_4bit.cpp), written once for every format: a format says how one step of a
// panel (32 rows, one column) widens to f32 weights — exactly the format's own
// dequantization — and this header runs the f32 path's multiply-adds on them in the f32 path's
// chain order (packed_walk.h). So every format's product has the bits of the dense f32 product
// on its dequantized matrix, whatever the rows, tile, thread or kernel. Internal to core/cpu.
//
// A format F gives:
//   struct Panel { …; int64_t block_cols; };   one panel as its kernels read it
//   static Panel panel(const void* w, int64_t padded_rows, int64_t k, int64_t block_cols, int64_t p);
//   static size_t panel_bytes(int64_t k);       the values' bytes of a panel
//   static float weight(const Panel&, int64_t t, int64_t c);              scalar, the reference
//   struct Block512; static Block512 block512(const Panel&, int64_t b);   column block b's constants
//   static void widen512(const Panel&, int64_t t, const Block512&, __m512& rows0_15, __m512& rows16_31);
//   struct Block2;   static Block2 block2(const Panel&, int64_t b);
//   static void widen2(const Panel&, int64_t t, const Block2&, __m256 rows[4]);   8 rows each
#pragma once
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*().
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <array>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu/packed_walk.h"
#include "core/dtype.h"
#include "core/error.h"

namespace linnet::cpu::quantized {

// A format F whose dequantization rounds each weight to f16 (GPTQ and AWQ: (q − zero) · scale in
// the scales' fp16). F's f32 weight is that product exactly (a 4- or 8-bit integer times an f16
// scale), so rounding it to f16 (vcvtps2ph, nearest even) is the format's one rounding.
template <class F>
struct F16Rounded : F {
  using Panel = typename F::Panel;
  using Block512 = typename F::Block512;
  using Block2 = typename F::Block2;
  static float weight(const Panel& p, int64_t t, int64_t c) { return f16_to_f32(f32_to_f16(F::weight(p, t, c))); }
  __attribute__((target("avx512f,avx512bw"))) static void widen512(const Panel& p, int64_t t, const Block512& b,
                                                                     __m512& lo, __m512& hi) {
    F::widen512(p, t, b, lo, hi);
    lo = _mm512_cvtph_ps(_mm512_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    hi = _mm512_cvtph_ps(_mm512_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  __attribute__((target("avx2,fma,f16c"))) static void widen2(const Panel& p, int64_t t, const Block2& b, __m256 wv[4]) {
    F::widen2(p, t, b, wv);
    for (int i = 0; i < 4; ++i) wv[i] = _mm256_cvtph_ps(_mm256_cvtps_ph(wv[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

// A format F whose dequantization rounds each weight to bf16 (compressed-tensors on a bf16 model:
// (q − zero) · scale in the scales' bf16). F's f32 weight is that product exactly (an 8-bit or
// smaller integer, or an E4M3 value, times a bf16 scale), so rounding it to bf16 (to nearest,
// ties to even: add 0x7fff plus the kept lowest bit, drop the low half) is that one rounding.
// (Weights are finite: the loader refuses NaN scales and values.)
template <class F>
struct Bf16Rounded : F {
  using Panel = typename F::Panel;
  using Block512 = typename F::Block512;
  using Block2 = typename F::Block2;
  static float weight(const Panel& p, int64_t t, int64_t c) { return round_to(DType::bf16, F::weight(p, t, c)); }
  __attribute__((target("avx512f,avx512bw"))) static __m512 round512(__m512 v) {
    const __m512i b = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(b, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  __attribute__((target("avx512f,avx512bw"))) static void widen512(const Panel& p, int64_t t, const Block512& b,
                                                                     __m512& lo, __m512& hi) {
    F::widen512(p, t, b, lo, hi);
    lo = round512(lo);
    hi = round512(hi);
  }
  __attribute__((target("avx2,fma"))) static __m256 round2(__m256 v) {
    const __m256i b = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(b, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  __attribute__((target("avx2,fma"))) static void widen2(const Panel& p, int64_t t, const Block2& b, __m256 wv[4]) {
    F::widen2(p, t, b, wv);
    for (int i = 0; i < 4; ++i) wv[i] = round2(wv[i]);
  }
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// The 4-bit matrices' bytes (int4 and MXFP4, either layout): every panel's nibbles (padded_rows
// / 2 bytes a column), then on a cache line every panel's scales [⌈k/bc⌉][32] f32 (MXFP4: its
// exponents, u8), then the zero points [⌈k/bc⌉][32] u8.
inline size_t nibble_scales_offset(int64_t padded_rows, int64_t cols) {
  return (static_cast<size_t>(padded_rows / 2 * cols) + 63) / 64 * 64;
}
inline size_t nibble_zeros_offset(int64_t padded_rows, int64_t cols, int64_t block_cols) {
  return nibble_scales_offset(padded_rows, cols) + static_cast<size_t>(padded_rows * ceil_div(cols, block_cols)) * sizeof(float);
}

// An int4 matrix's panel p (either layout): its nibbles, its scales and zero points [⌈k/bc⌉][32].
struct Int4Panel {
  const uint8_t* q;
  const float* scales;
  const uint8_t* zeros;
  int64_t block_cols;
};
inline Int4Panel int4_panel(const void* w, int64_t padded_rows, int64_t k, int64_t block_cols, int64_t p) {
  const uint8_t* base = static_cast<const uint8_t*>(w);
  const int64_t kb = ceil_div(k, block_cols);
  return {base + p * (32 / 2 * k),
          reinterpret_cast<const float*>(base + nibble_scales_offset(padded_rows, k)) + p * kb * 32,
          base + nibble_zeros_offset(padded_rows, k, block_cols) + p * kb * 32, block_cols};
}

// An MXFP4 matrix's panel p (either layout): its nibbles and its E8M0 exponents [⌈k/bc⌉][32].
struct Mxfp4Panel {
  const uint8_t* q;
  const uint8_t* exps;
  int64_t block_cols;
};
inline Mxfp4Panel mxfp4_panel(const void* w, int64_t padded_rows, int64_t k, int64_t block_cols, int64_t p) {
  const uint8_t* base = static_cast<const uint8_t*>(w);
  return {base + p * (32 / 2 * k), base + nibble_scales_offset(padded_rows, k) + p * ceil_div(k, block_cols) * 32,
          block_cols};
}

// The 8-bit matrices' bytes (FP8 and int8, either layout): every panel's bytes (padded_rows a
// column), then on a cache line every panel's scales [⌈k/bc⌉][32] f32.
inline size_t byte_scales_offset(int64_t padded_rows, int64_t cols) {
  return (static_cast<size_t>(padded_rows * cols) + 63) / 64 * 64;
}
// An 8-bit matrix's panel p (either layout): its bytes and its scales.
struct BytePanel {
  const uint8_t* q;
  const float* scales;
  int64_t block_cols;
};
inline BytePanel byte_panel(const void* w, int64_t padded_rows, int64_t k, int64_t block_cols, int64_t p) {
  const uint8_t* base = static_cast<const uint8_t*>(w);
  const float* scales = reinterpret_cast<const float*>(base + byte_scales_offset(padded_rows, k));
  return {base + p * 32 * k, scales + p * ceil_div(k, block_cols) * 32, block_cols};
}
// The integer dot products' layout of int8 panels: the byte of a panel that holds row c's column
// t. Each 32 columns are 1024 bytes: 256 for each 8 rows, 32 for each 4 columns, 4 a row.
inline size_t dot_byte(int64_t t, int64_t c) {
  return static_cast<size_t>((t / 32) * 1024 + (c / 8) * 256 + (t % 32 / 4) * 32 + (c % 8) * 4 + t % 4);
}

// The integer dot products' layout of 4-bit panels (packed_matmul.h, LINNET_CPU_DOT=int8): the
// byte of a panel's nibbles that holds row c's (0…31) column t, its low nibble for t % 8 < 4.
// Each 32 columns are 512 bytes: 128 for each 8 rows, 32 for each 8 columns, 4 a row.
inline size_t dot_nibble_byte(int64_t t, int64_t c) {
  return static_cast<size_t>((t / 32) * 512 + (c / 8) * 128 + (t % 32 / 8) * 32 + (c % 8) * 4 + t % 4);
}

// The column block [t, end) of a chain's steps that share one block's constants.
inline int64_t block_end(int64_t t, int64_t chain_end, int64_t bc) { return std::min(chain_end, (t / bc + 1) * bc); }

// ---- scalar: the reference ----
template <class F>
void micro_scalar(const float* x, int64_t ldx, int64_t k, const typename F::Panel& p, int rows, float* tile) {
  for (int r = 0; r < rows; ++r)
    for (int64_t c = 0; c < kPanel; ++c) {
      float sum = 0;
      for (int q = 0; q < kChains; ++q) {
        float acc = 0;
        for (int64_t t = chain_begin(k, q); t < chain_begin(k, q + 1); ++t) acc = std::fma(x[r * ldx + t], F::weight(p, t, c), acc);
        sum = q == 0 ? acc : sum + acc;
      }
      tile[r * kPanel + c] = sum;
    }
}

// ---- AVX-512 (with BW): R rows × 2 vectors of 16 ----
template <class F, int R>
__attribute__((target("avx512f,avx512bw"))) void micro_avx512(const float* x, int64_t ldx, int64_t k,
                                                                const typename F::Panel& p, int, float* tile) {
  for (int q = 0; q < kChains; ++q) {
    __m512 a[R][2];
    for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
    const int64_t end = chain_begin(k, q + 1);
    for (int64_t t = chain_begin(k, q); t < end;) {
      const typename F::Block512 blk = F::block512(p, t / p.block_cols);
      for (const int64_t e = block_end(t, end, p.block_cols); t < e; ++t) {
        __m512 lo, hi;
        F::widen512(p, t, blk, lo, hi);
        for (int r = 0; r < R; ++r) {
          const __m512 xv = _mm512_set1_ps(x[r * ldx + t]);
          a[r][0] = _mm512_fmadd_ps(xv, lo, a[r][0]);
          a[r][1] = _mm512_fmadd_ps(xv, hi, a[r][1]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < 2; ++h) {
        float* o = tile + r * kPanel + 16 * h;
        _mm512_storeu_ps(o, q == 0 ? a[r][h] : _mm512_add_ps(_mm512_loadu_ps(o), a[r][h]));
      }
  }
}

// ---- AVX2 + FMA (+ F16C, as the f32 path's kernel): R rows × 4 vectors of 8 ----
template <class F, int R>
__attribute__((target("avx2,fma,f16c"))) void micro_avx2(const float* x, int64_t ldx, int64_t k, const typename F::Panel& p,
                                                    int, float* tile) {
  for (int q = 0; q < kChains; ++q) {
    __m256 a[R][4];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < 4; ++i) a[r][i] = _mm256_setzero_ps();
    const int64_t end = chain_begin(k, q + 1);
    for (int64_t t = chain_begin(k, q); t < end;) {
      const typename F::Block2 blk = F::block2(p, t / p.block_cols);
      for (const int64_t e = block_end(t, end, p.block_cols); t < e; ++t) {
        __m256 wv[4];
        F::widen2(p, t, blk, wv);
        for (int r = 0; r < R; ++r) {
          const __m256 xv = _mm256_broadcast_ss(x + r * ldx + t);
          for (int i = 0; i < 4; ++i) a[r][i] = _mm256_fmadd_ps(xv, wv[i], a[r][i]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < 4; ++i) {
        float* o = tile + r * kPanel + 8 * i;
        _mm256_storeu_ps(o, q == 0 ? a[r][i] : _mm256_add_ps(_mm256_loadu_ps(o), a[r][i]));
      }
  }
}

// Steps [0, k) of a panel as f32 [k][32], as the f32 path packs them: what its kernels then multiply.
template <class F>
__attribute__((target("avx512f,avx512bw"))) void dequantize_panel_avx512(const typename F::Panel& p, int64_t k, float* out) {
  for (int64_t t = 0; t < k;) {
    const typename F::Block512 blk = F::block512(p, t / p.block_cols);
    for (const int64_t e = std::min(k, (t / p.block_cols + 1) * p.block_cols); t < e; ++t) {
      __m512 lo, hi;
      F::widen512(p, t, blk, lo, hi);
      _mm512_storeu_ps(out + t * kPanel, lo);
      _mm512_storeu_ps(out + t * kPanel + 16, hi);
    }
  }
}
template <class F>
__attribute__((target("avx2,fma,f16c"))) void dequantize_panel_avx2(const typename F::Panel& p, int64_t k, float* out) {
  for (int64_t t = 0; t < k;) {
    const typename F::Block2 blk = F::block2(p, t / p.block_cols);
    for (const int64_t e = std::min(k, (t / p.block_cols + 1) * p.block_cols); t < e; ++t) {
      __m256 wv[4];
      F::widen2(p, t, blk, wv);
      for (int i = 0; i < 4; ++i) _mm256_storeu_ps(out + t * kPanel + 8 * i, wv[i]);
    }
  }
}
// The widest the CPU has (the same values from every one: each is the format's one rounding).
template <class F>
void dequantize_panel(const typename F::Panel& p, int64_t k, float* out) {
  static const int width = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bw")                                                       ? 512
           : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") ? 256
                                                                                                         : 0;
  }();
  if (width == 512) return dequantize_panel_avx512<F>(p, k, out);
  if (width == 256) return dequantize_panel_avx2<F>(p, k, out);
  for (int64_t t = 0; t < k; ++t)
    for (int64_t c = 0; c < kPanel; ++c) out[t * kPanel + c] = F::weight(p, t, c);
}

template <class F>
using Micro = void (*)(const float* x, int64_t ldx, int64_t k, const typename F::Panel& p, int rows, float* tile);

template <class F, int... R>
std::vector<Micro<F>> table512(std::integer_sequence<int, R...>) {
  return {micro_avx512<F, R + 1>...};
}
template <class F, int... R>
std::vector<Micro<F>> table2(std::integer_sequence<int, R...>) {
  return {micro_avx2<F, R + 1>...};
}

// The kernels by packed_matmul's names (packed_matmul_kernels()), [rows − 1].
template <class F>
std::vector<Micro<F>> kernel_table(const std::string& name) {
  __builtin_cpu_init();
  if (name == "avx512f" && __builtin_cpu_supports("avx512bw"))
    return table512<F>(std::make_integer_sequence<int, kRows512>{});
  if (name == "avx512f" || name == "avx2+fma")  // (an AVX-512 CPU without BW: the AVX2 kernel)
    return table2<F>(std::make_integer_sequence<int, kRows2>{});
  return {micro_scalar<F>};
}

// out[n, o] = x[n, k] · W[row0 : row0 + o]ᵀ for W packed by format F (padded_rows: whole panels).
template <class F>
void product(const char* what, const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows,
             int64_t block_cols, int64_t row0, int64_t o, float* out, const char* kernel) {
  LINNET_CHECK(block_cols > 0 && padded_rows % kPanel == 0, what, ": block_cols ", block_cols, ", padded rows ",
               padded_rows);
  const std::string name = kernel ? kernel : packed_matmul_kernel();
  bool known = false;
  for (const char* kname : packed_matmul_kernels()) known |= name == kname;
  if (!known) throw Error(str(what, ": no kernel '", name, "' on this CPU"));
  static const std::vector<Micro<F>> k512 = kernel_table<F>("avx512f"), k2 = kernel_table<F>("avx2+fma"),
                                     k1 = kernel_table<F>("scalar");
  const std::vector<Micro<F>>& micro = name == "avx512f" ? k512 : name == "avx2+fma" ? k2 : k1;
  const F32Tile dense = f32_tile(name.c_str());
  const size_t panel_bytes = F::panel_bytes(k);
  // Few rows: widen in the kernel, each weight read once. More than a tile of rows: each panel
  // widened once into f32 (in L2) and the f32 path's kernels run on it, tile after tile — the
  // same bits, the widening not repeated per tile.
  const bool widen_once = n > dense.max_rows && dense.max_rows > 1;
  const int64_t tile_rows = widen_once ? dense.max_rows : static_cast<int64_t>(micro.size());
  for_each_tile(n, k, w, panel_bytes, row0, o, tile_rows, out, [&](int64_t r0, int rows, const void* panel, float* tile) {
    const int64_t p = (static_cast<const char*>(panel) - static_cast<const char*>(w)) / static_cast<int64_t>(panel_bytes);
    const typename F::Panel f = F::panel(w, padded_rows, k, block_cols, p);
    if (!widen_once) {
      micro[static_cast<size_t>(rows - 1)](x + r0 * k, k, k, f, rows, tile);
      return;
    }
    thread_local std::vector<float> wide;
    thread_local const void* wide_of = nullptr;
    thread_local int64_t wide_r0 = -1;
    // A new panel, or the same one in the next block of rows (r0 went back).
    if (wide_of != panel || r0 <= wide_r0 || wide.size() != static_cast<size_t>(kPanel * k)) {
      wide.resize(static_cast<size_t>(kPanel * k));
      dequantize_panel<F>(f, k, wide.data());
      wide_of = panel;
    }
    wide_r0 = r0;
    dense.by_rows[rows - 1](x + r0 * k, k, k, wide.data(), rows, tile);
  });
}

}  // namespace linnet::cpu::quantized

#pragma GCC diagnostic pop
