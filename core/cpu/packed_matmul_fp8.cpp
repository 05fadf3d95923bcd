// The product of FP8 E4M3 weights with block scales, read as stored (core/cpu/packed_matmul.h).
// Each kernel widens a step's 32 bytes to f32 in registers, exactly (a power of two off, put
// back through the scale), times the row's block scale (one f32 rounding), then the f32 path's
// multiply-adds in the f32 path's chain order: the bits of the dense product on the
// dequantized matrix, whatever the rows, tile, thread or kernel.
#include "core/cpu/packed_matmul.h"

#include "core/cpu/packed_walk.h"
#include "core/error.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*().
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <array>
#include <cstring>
#include <limits>
#include <cmath>
#include <string>
#include <utility>

namespace linnet::cpu {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// Scales start on a cache line after the panels' bytes.
size_t scales_offset(int64_t padded_rows, int64_t cols) { return (static_cast<size_t>(padded_rows * cols) + 63) / 64 * 64; }

// One panel as a kernel reads it: its bytes [k][32] and scales [⌈k/bc⌉][32].
struct F8Panel {
  const uint8_t* q;
  const float* scales;
  int64_t block_cols;
};

// The column block [t, end) of a chain's steps that share one scale vector.
inline int64_t block_end(int64_t t, int64_t chain_end, int64_t bc) { return std::min(chain_end, (t / bc + 1) * bc); }

// ---- scalar: the reference ----
void micro_f8_scalar(const float* x, int64_t ldx, int64_t k, const F8Panel& p, int rows, float* tile) {
  for (int r = 0; r < rows; ++r)
    for (int64_t c = 0; c < kPanel; ++c) {
      float sum = 0;
      for (int q = 0; q < kChains; ++q) {
        float acc = 0;
        for (int64_t t = chain_begin(k, q); t < chain_begin(k, q + 1); ++t) {
          const float w = f8_e4m3_to_f32(p.q[t * kPanel + c]) * p.scales[(t / p.block_cols) * kPanel + c];
          acc = std::fma(x[r * ldx + t], w, acc);
        }
        sum = q == 0 ? acc : sum + acc;
      }
      tile[r * kPanel + c] = sum;
    }
}

// ---- AVX-512 (with BW): R rows × 2 vectors of 16 ----
// A step's 32 bytes become 32 f16 words, each E4M3 value times 2^-8 exactly (E4M3's exponent
// and mantissa are an f16's, 8 binades lower; its subnormals f16's): zero-extend, shift the 7
// magnitude bits into place, move the sign from bit 14 to 15 by adding it to itself; then
// vcvtph2ps. The block's scale is multiplied by 2^8 (exact), so each weight is again one f32
// rounding of e4m3 · scale.
__attribute__((target("avx512f,avx512bw"))) inline void widen_e4m3_32(const uint8_t* w, __m512& lo, __m512& hi) {
  const __m512i t = _mm512_slli_epi16(_mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))), 7);
  const __m512i h = _mm512_add_epi16(t, _mm512_and_si512(t, _mm512_set1_epi16(0x4000)));
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

// Steps [t0, t1) of a panel (one column block, scales s) as f32 into out [k][32].
__attribute__((target("avx512f,avx512bw"))) void dequantize_steps_avx512(const uint8_t* q, const float* s, int64_t t0,
                                                                           int64_t t1, float* out) {
  const __m512 s_lo = _mm512_mul_ps(_mm512_loadu_ps(s), _mm512_set1_ps(256.0f));
  const __m512 s_hi = _mm512_mul_ps(_mm512_loadu_ps(s + 16), _mm512_set1_ps(256.0f));
  for (int64_t t = t0; t < t1; ++t) {
    __m512 lo, hi;
    widen_e4m3_32(q + t * kPanel, lo, hi);
    _mm512_storeu_ps(out + t * kPanel, _mm512_mul_ps(lo, s_lo));
    _mm512_storeu_ps(out + t * kPanel + 16, _mm512_mul_ps(hi, s_hi));
  }
}

template <int R>
__attribute__((target("avx512f,avx512bw"))) void micro_f8_avx512(const float* x, int64_t ldx, int64_t k,
                                                                    const F8Panel& p, int, float* tile) {
  const __m512 two8 = _mm512_set1_ps(256.0f);
  for (int q = 0; q < kChains; ++q) {
    __m512 a[R][2];
    for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
    const int64_t end = chain_begin(k, q + 1);
    for (int64_t t = chain_begin(k, q); t < end;) {
      const float* s = p.scales + (t / p.block_cols) * kPanel;
      const __m512 s_lo = _mm512_mul_ps(_mm512_loadu_ps(s), two8), s_hi = _mm512_mul_ps(_mm512_loadu_ps(s + 16), two8);
      for (const int64_t e = block_end(t, end, p.block_cols); t < e; ++t) {
        const uint8_t* w = p.q + t * kPanel;
        _mm_prefetch(reinterpret_cast<const char*>(w + 4096), _MM_HINT_T0);
        __m512 lo, hi;
        widen_e4m3_32(w, lo, hi);
        lo = _mm512_mul_ps(lo, s_lo);
        hi = _mm512_mul_ps(hi, s_hi);
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

// ---- AVX2 + FMA: R rows × 4 vectors of 8 ----
// Sign, then the 7 magnitude bits shifted into an f32's exponent and mantissa (an f32 2^120
// times too small, subnormal for E4M3's subnormals) multiplied by 2^120, exact.
__attribute__((target("avx2,fma"))) inline __m256 widen_e4m3_8(const uint8_t* bytes) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes)));
  const __m256i mag = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7f)), 20);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
  const __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(0x1p120f));
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(f), sign));
}

template <int R>
__attribute__((target("avx2,fma"))) void micro_f8_avx2(const float* x, int64_t ldx, int64_t k, const F8Panel& p, int,
                                                        float* tile) {
  for (int q = 0; q < kChains; ++q) {
    __m256 a[R][4];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < 4; ++i) a[r][i] = _mm256_setzero_ps();
    const int64_t end = chain_begin(k, q + 1);
    for (int64_t t = chain_begin(k, q); t < end;) {
      const float* s = p.scales + (t / p.block_cols) * kPanel;
      __m256 sv[4];
      for (int i = 0; i < 4; ++i) sv[i] = _mm256_loadu_ps(s + 8 * i);
      for (const int64_t e = block_end(t, end, p.block_cols); t < e; ++t) {
        const uint8_t* w = p.q + t * kPanel;
        _mm_prefetch(reinterpret_cast<const char*>(w + 4096), _MM_HINT_T0);
        __m256 wv[4];
        for (int i = 0; i < 4; ++i) wv[i] = _mm256_mul_ps(widen_e4m3_8(w + 8 * i), sv[i]);
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

using MicroF8 = void (*)(const float* x, int64_t ldx, int64_t k, const F8Panel& p, int rows, float* tile);

template <int... R>
constexpr std::array<MicroF8, sizeof...(R)> table512(std::integer_sequence<int, R...>) {
  return {micro_f8_avx512<R + 1>...};
}
template <int... R>
constexpr std::array<MicroF8, sizeof...(R)> table2(std::integer_sequence<int, R...>) {
  return {micro_f8_avx2<R + 1>...};
}

// The kernels by packed_matmul's names (packed_matmul_kernels()), [rows − 1].
std::vector<MicroF8> kernel_table(const std::string& name) {
  __builtin_cpu_init();
  if (name == "avx512f" && __builtin_cpu_supports("avx512bw")) {
    const auto t = table512(std::make_integer_sequence<int, kRows512>{});
    return {t.begin(), t.end()};
  }
  if (name == "avx512f" || name == "avx2+fma") {  // (an AVX-512 CPU without BW: the AVX2 kernel)
    const auto t = table2(std::make_integer_sequence<int, kRows2>{});
    return {t.begin(), t.end()};
  }
  return {micro_f8_scalar};
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

void round_activations_fp8(const float* x, int64_t n, int64_t k, int64_t group, float* out) {
  const int64_t g = group > 0 ? group : k;
#pragma omp parallel for if (n * k > 65536)
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c0 = 0; c0 < k; c0 += g) {
      const int64_t c1 = std::min(k, c0 + g);
      const float* in = x + r * k;
      float amax = 0;
      for (int64_t c = c0; c < c1; ++c) amax = std::isnan(in[c]) || std::isnan(amax) ? NAN : std::max(amax, std::fabs(in[c]));
      float s = amax / 448.0f;
      if (s == 0) s = std::numeric_limits<float>::epsilon();
      for (int64_t c = c0; c < c1; ++c) {
        const float q = in[c] / s;
        out[r * k + c] = std::isnan(q) ? q : round_to_e4m3(std::clamp(q, -448.0f, 448.0f)) * s;
      }
    }
}

size_t packed_fp8_bytes(int64_t rows, int64_t cols, int64_t block_cols) {
  const int64_t padded = ceil_div(rows, kPanel) * kPanel;
  return scales_offset(padded, cols) + static_cast<size_t>(padded * ceil_div(cols, block_cols)) * sizeof(float);
}

void pack_fp8(const uint8_t* q, const float* row_scales, int64_t rows, int64_t cols, int64_t block_cols, void* dst) {
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
      for (int64_t t = 0; t < cols; ++t) panel[t * kPanel + c] = in[t];
      for (int64_t b = 0; b < kb; ++b) ps[b * kPanel + c] = row_scales[(p * kPanel + c) * kb + b];
    }
  }
}

void unpack_rows_fp8_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                         int64_t rows, float* dst) {
  const uint8_t* base = static_cast<const uint8_t*>(packed);
  const float* scales = reinterpret_cast<const float*>(base + scales_offset(padded_rows, cols));
  const int64_t kb = ceil_div(cols, block_cols);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = row0 + i, p = r / kPanel, c = r % kPanel;
    for (int64_t t = 0; t < cols; ++t)
      dst[i * cols + t] = f8_e4m3_to_f32(base[p * kPanel * cols + t * kPanel + c]) *
                          scales[(p * kb + t / block_cols) * kPanel + c];
  }
}

namespace {
// A panel's weights as f32, [k][32] as the f32 path packs them: what its kernels then multiply.
void dequantize_panel(const F8Panel& p, int64_t k, float* out) {
  const bool bw = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bw") != 0;
  }();
  for (int64_t t0 = 0; t0 < k; t0 += p.block_cols) {
    const float* s = p.scales + (t0 / p.block_cols) * kPanel;
    const int64_t t1 = std::min(k, t0 + p.block_cols);
    if (bw) {
      dequantize_steps_avx512(p.q, s, t0, t1, out);
    } else {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t c = 0; c < kPanel; ++c) out[t * kPanel + c] = f8_e4m3_to_f32(p.q[t * kPanel + c]) * s[c];
    }
  }
}
}  // namespace

void packed_matmul_fp8(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows, int64_t block_cols,
                       int64_t row0, int64_t o, float* out, const char* kernel) {
  LINNET_CHECK(block_cols > 0 && padded_rows % kPanel == 0, "packed_matmul_fp8: block_cols ", block_cols,
               ", padded rows ", padded_rows);
  const std::string name = kernel ? kernel : packed_matmul_kernel();
  bool known = false;
  for (const char* kname : packed_matmul_kernels()) known |= name == kname;
  if (!known) throw Error(str("packed_matmul_fp8: no kernel '", name, "' on this CPU"));
  static const std::vector<MicroF8> k512 = kernel_table("avx512f"), k2 = kernel_table("avx2+fma"),
                                    k1 = kernel_table("scalar");
  const std::vector<MicroF8>& micro = name == "avx512f" ? k512 : name == "avx2+fma" ? k2 : k1;
  const F32Tile dense = f32_tile(name.c_str());
  const uint8_t* base = static_cast<const uint8_t*>(w);
  const float* scales = reinterpret_cast<const float*>(base + scales_offset(padded_rows, k));
  const int64_t kb = ceil_div(k, block_cols), panel_bytes = kPanel * k;
  // Few rows: widen in the kernel, each weight read once. More than a tile of rows: each panel
  // widened once into f32 (in L2) and the f32 path's kernels run on it, tile after tile — the
  // same bits, the widening not repeated per tile.
  const bool widen_once = n > dense.max_rows && dense.max_rows > 1;
  const int64_t tile_rows = widen_once ? dense.max_rows : static_cast<int64_t>(micro.size());
  for_each_tile(n, k, w, static_cast<size_t>(panel_bytes), row0, o, tile_rows, out,
                [&](int64_t r0, int rows, const void* panel, float* tile) {
                  const int64_t p = (static_cast<const uint8_t*>(panel) - base) / panel_bytes;
                  const F8Panel f{static_cast<const uint8_t*>(panel), scales + p * kb * kPanel, block_cols};
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
                    dequantize_panel(f, k, wide.data());
                    wide_of = panel;
                  }
                  wide_r0 = r0;
                  dense.by_rows[rows - 1](x + r0 * k, k, k, wide.data(), rows, tile);
                });
}

}  // namespace linnet::cpu
