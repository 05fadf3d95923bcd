// The integer dot products of 4- and 8-bit weights (LINNET_CPU_DOT=int8; core/cpu/packed_matmul.h):
// each row of x quantized per block of 32 columns as llama.cpp's Q8_0 is, then AVX2's integer
// products over a block, exact, and one f32 multiply-add a block and output, in block order. The
// scalar kernel does the same operations; both give the same bits for every n and tile (batch
// invariant).
//
// 4-bit panels (quantized::dot_nibble_byte): each block of 32 columns is 512 bytes, 128 for each
// 8 rows, 32 bytes (one AVX2 vector) for each 8 columns: a 32-bit lane per row whose 4 low
// nibbles are columns t…t+3 and 4 high ones t+4…t+7. One mask and one shift give two vectors of
// u8 weights, each lane 4 consecutive columns of its row, against 4 broadcast bytes of x
// (vpmaddubsw: u8 × s8 pairs into i16; vpmaddwd: i16 pairs into i32).
// int8 panels (quantized::dot_byte): each block is 1024 bytes, 256 for each 8 rows, 32 for each
// 4 columns: |w| against x with w's sign (vpabsb, vpsignb, vpmaddubsw), as llama.cpp's Q8_0.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/cpu/packed_matmul.h"
#include "core/cpu/packed_quantized.h"
#include "core/cpu/packed_walk.h"
#include "core/error.h"

namespace linnet::cpu {

namespace {

using quantized::ceil_div;
constexpr int64_t kBlock = 32;   // x's quantization block (columns), and the integer sums'
// Rows of x a tile: prefill 512 of the Llama-3.2-1B shape's W4A16 at 78 tok/s with 3 (before
// the weights were unpacked once a tile), 84 with 3, 88 with 4, 89 with 6, 87 with 8.
constexpr int kRowsDot = 4;
// (Each format's weights are prefetched F::kAhead bytes ahead: a lone row's 4-bit product reaches
// this VM's read ceiling, 29.9 GB/s on 2 cores, with 1 KiB — 26 GB/s without, 2 KiB no better;
// int8's 27.8 GB/s with 4 KiB, 26.5 with 1 KiB.)

bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

int nibble(const uint8_t* q, int64_t t, int64_t c) {
  const uint8_t b = q[quantized::dot_nibble_byte(t, c)];
  return (t % 8 < 4 ? b : b >> 4) & 15;
}

// x quantized, and each block's group of the weights' scales (a table: no division a block).
struct DotInput {
  Q8Rows x;
  std::vector<int32_t> group;  // [k / 32]
};

// ---- how a block of x meets a block of weights ----
// 4-bit weights: x's 4-byte words broadcast, columns 8s…8s+3 (lo[s]) and 8s+4…8s+7 (hi[s]) of
// the block; a block of 8 rows is 128 bytes, 32 for each 8 columns.
struct NibbleX {
  __m256i lo[4], hi[4];
};
__attribute__((target("avx2,fma"), always_inline)) inline NibbleX nibble_x(const DotInput& in, int64_t r, int64_t b) {
  const int8_t* xq = in.x.q.data() + r * in.x.k + b * kBlock;
  NibbleX out;
  for (int s = 0; s < 4; ++s) {
    int32_t a, c;
    std::memcpy(&a, xq + 8 * s, 4);
    std::memcpy(&c, xq + 8 * s + 4, 4);
    out.lo[s] = _mm256_set1_epi32(a), out.hi[s] = _mm256_set1_epi32(c);
  }
  return out;
}
// A block of 8 rows' weights as F multiplies them (F::lookup of their nibbles), columns 8s…8s+3
// (lo[s]) and 8s+4…8s+7 (hi[s]): unpacked once for all the rows of x of a tile.
struct NibbleW {
  __m256i lo[4], hi[4];
};
template <class F>
__attribute__((target("avx2,fma"), always_inline)) inline NibbleW nibble_w(const uint8_t* w) {
  const __m256i low = _mm256_set1_epi8(0x0f);
  NibbleW out;
  for (int s = 0; s < 4; ++s) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * s));
    out.lo[s] = F::lookup(_mm256_and_si256(wv, low));
    out.hi[s] = F::lookup(_mm256_and_si256(_mm256_srli_epi16(wv, 4), low));
  }
  return out;
}
// Each lane's exact Σ over the block (before the zero point): the i16 sums of F::madd's pairs add
// up over the 4 steps (at most 8 · 3810 < 2¹⁵), then vpmaddwd makes them a lane's i32. Either
// with x's block broadcast once (a lone row: the weights unpacked for it alone) or with the
// weights unpacked once (several rows: x's words broadcast as they are used).
template <class F>
__attribute__((target("avx2,fma"), always_inline)) inline __m256i nibble_sum(const NibbleX& xv, const uint8_t* w) {
  const NibbleW wv = nibble_w<F>(w);
  __m256i s16 = _mm256_setzero_si256();
  for (int s = 0; s < 4; ++s)
    s16 = _mm256_add_epi16(s16, _mm256_add_epi16(F::madd(wv.lo[s], xv.lo[s]), F::madd(wv.hi[s], xv.hi[s])));
  return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
}
template <class F>
__attribute__((target("avx2,fma"), always_inline)) inline __m256i nibble_sum(const NibbleW& wv, const int8_t* xq) {
  __m256i s16 = _mm256_setzero_si256();
  for (int s = 0; s < 4; ++s) {
    int32_t a, c;
    std::memcpy(&a, xq + 8 * s, 4);
    std::memcpy(&c, xq + 8 * s + 4, 4);
    s16 = _mm256_add_epi16(
        s16, _mm256_add_epi16(F::madd(wv.lo[s], _mm256_set1_epi32(a)), F::madd(wv.hi[s], _mm256_set1_epi32(c))));
  }
  return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
}

// ---- the formats: how a weight multiplies, its zero point, its scale ----
// Per output (row c of a panel) and block b of group g: v = Σ value · q − zero_term (exact),
// then acc = fma(float(v), scale · x_scale(d_b), acc).

// What the 4-bit formats share: blocks of 512 bytes, x and weights met as nibble_x / nibble_w do;
// F gives lookup (a nibble to the value F multiplies) and madd (its products' pairs).
template <class F>
struct NibbleBlocks {
  static constexpr int64_t kBlockBytes = 512, kAhead = 1024;  // a block of 32 columns of the panel's 32 rows
  using XBlock = NibbleX;
  using WBlock = NibbleW;
  __attribute__((target("avx2,fma"), always_inline)) static XBlock x_block(const DotInput& in, int64_t r, int64_t b) {
    return nibble_x(in, r, b);
  }
  __attribute__((target("avx2,fma"), always_inline)) static __m256i block_sum(const XBlock& xv, const uint8_t* w) {
    return nibble_sum<F>(xv, w);
  }
  __attribute__((target("avx2,fma"), always_inline)) static WBlock w_block(const uint8_t* w) { return nibble_w<F>(w); }
  __attribute__((target("avx2,fma"), always_inline)) static __m256i w_sum(const WBlock& wv, const int8_t* xq) {
    return nibble_sum<F>(wv, xq);
  }
};

struct Int4Dot : NibbleBlocks<Int4Dot> {
  using Panel = quantized::Int4Panel;
  static Panel panel(const void* w, int64_t padded_rows, int64_t k, int64_t block_cols, int64_t p) {
    return quantized::int4_panel(w, padded_rows, k, block_cols, p);
  }
  static int value(const Panel& p, int64_t t, int64_t c) { return nibble(p.q, t, c); }
  static int32_t zero_term(const Panel& p, int64_t g, int64_t c, int32_t xsum) { return p.zeros[g * kPanel + c] * xsum; }
  static float scale(const Panel& p, int64_t g, int64_t c) { return p.scales[g * kPanel + c]; }
  static float x_scale(float d) { return d; }
  static float weight(const Panel& p, int64_t t, int64_t c) {
    const int64_t g = t / p.block_cols;
    return static_cast<float>(value(p, t, c) - p.zeros[g * kPanel + c]) * scale(p, g, c);
  }

  // u8 weights 0…15 × s8 x: a pair at most 2 · 15 · 127 = 3810.
  __attribute__((target("avx2,fma"), always_inline)) static __m256i lookup(__m256i nibbles) { return nibbles; }
  __attribute__((target("avx2,fma"))) static __m256i madd(__m256i w, __m256i x) { return _mm256_maddubs_epi16(w, x); }
  // zero · Σq per lane by vpmaddwd: zero in a lane's low 16 bits, Σq (|Σq| ≤ 32 · 127) in x's.
  __attribute__((target("avx2,fma"))) static __m256i zero_term8(const Panel& p, int64_t g, int i, int32_t xsum) {
    const __m256i z = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p.zeros + g * kPanel + 8 * i)));
    return _mm256_madd_epi16(z, _mm256_set1_epi32(xsum & 0xffff));
  }
  __attribute__((target("avx2,fma"))) static __m256 scale8(const Panel& p, int64_t g, int i) {
    return _mm256_loadu_ps(p.scales + g * kPanel + 8 * i);
  }
};

// MXFP4: a nibble is E2M1 (bit 3 the sign); twice its value is an integer, |2v| ≤ 12, and the
// scale 2^(e − 127) takes the half: x_scale(d) = d / 2.
constexpr int8_t kTwiceE2M1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

struct Mxfp4Dot : NibbleBlocks<Mxfp4Dot> {
  using Panel = quantized::Mxfp4Panel;
  static Panel panel(const void* w, int64_t padded_rows, int64_t k, int64_t block_cols, int64_t p) {
    return quantized::mxfp4_panel(w, padded_rows, k, block_cols, p);
  }
  static int value(const Panel& p, int64_t t, int64_t c) { return kTwiceE2M1[nibble(p.q, t, c)]; }
  static int32_t zero_term(const Panel&, int64_t, int64_t, int32_t) { return 0; }
  static float scale(const Panel& p, int64_t g, int64_t c) { return f8_e8m0_to_f32(p.exps[g * kPanel + c]); }
  static float x_scale(float d) { return d * 0.5f; }
  static float weight(const Panel& p, int64_t t, int64_t c) {
    return static_cast<float>(value(p, t, c)) * 0.5f * scale(p, t / p.block_cols, c);
  }

  // 2v by a table lookup (vpshufb); |2v| against x with its sign (vpsignb; 0 where the weight is
  // 0): a pair at most 2 · 12 · 127 = 3048.
  __attribute__((target("avx2,fma"), always_inline)) static __m256i lookup(__m256i nibbles) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kTwiceE2M1)));
    return _mm256_shuffle_epi8(lut, nibbles);
  }
  __attribute__((target("avx2,fma"))) static __m256i madd(__m256i v, __m256i x) {
    return _mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(x, v));
  }
  __attribute__((target("avx2,fma"))) static __m256i zero_term8(const Panel&, int64_t, int, int32_t) {
    return _mm256_setzero_si256();
  }
  // 2^(e − 127): e << 23 is the f32, but for e = 0 (2^−127, subnormal).
  __attribute__((target("avx2,fma"))) static __m256 scale8(const Panel& p, int64_t g, int i) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p.exps + g * kPanel + 8 * i)));
    return _mm256_castsi256_ps(_mm256_blendv_epi8(_mm256_slli_epi32(e, 23), _mm256_set1_epi32(0x00400000),
                                                  _mm256_cmpeq_epi32(e, _mm256_setzero_si256())));
  }
};

// int8 weights (symmetric: no zero point), their panels in quantized::dot_byte's layout: a block
// of 8 rows is 256 bytes, 32 for each 4 columns. As llama.cpp's Q8_0: |w| as u8 (vpabsb: −128
// gives 0x80, 128 as u8) against x with w's sign (vpsignb: x is never −128), so vpmaddubsw's
// pairs are w · x exactly, at most 2 · 128 · 127 < 2¹⁵; vpmaddwd makes each 4 a lane's i32.
struct Int8Dot {
  using Panel = quantized::BytePanel;
  static Panel panel(const void* w, int64_t padded_rows, int64_t k, int64_t block_cols, int64_t p) {
    return quantized::byte_panel(w, padded_rows, k, block_cols, p);
  }
  static int value(const Panel& p, int64_t t, int64_t c) { return static_cast<int8_t>(p.q[quantized::dot_byte(t, c)]); }
  static int32_t zero_term(const Panel&, int64_t, int64_t, int32_t) { return 0; }
  static float scale(const Panel& p, int64_t g, int64_t c) { return p.scales[g * kPanel + c]; }
  static float x_scale(float d) { return d; }
  static float weight(const Panel& p, int64_t t, int64_t c) {
    return static_cast<float>(value(p, t, c)) * scale(p, t / p.block_cols, c);
  }

  static constexpr int64_t kBlockBytes = 1024, kAhead = 4096;
  struct XBlock {
    __m256i x[8];  // the block's 4-byte words broadcast
  };
  __attribute__((target("avx2,fma"), always_inline)) static XBlock x_block(const DotInput& in, int64_t r, int64_t b) {
    const int8_t* xq = in.x.q.data() + r * in.x.k + b * kBlock;
    XBlock out;
    for (int s = 0; s < 8; ++s) {
      int32_t a;
      std::memcpy(&a, xq + 4 * s, 4);
      out.x[s] = _mm256_set1_epi32(a);
    }
    return out;
  }
  __attribute__((target("avx2,fma"), always_inline)) static __m256i madd(__m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
  }
  __attribute__((target("avx2,fma"), always_inline)) static __m256i block_sum(const XBlock& xv, const uint8_t* w) {
    __m256i s = _mm256_setzero_si256();
    for (int step = 0; step < 8; ++step)
      s = _mm256_add_epi32(s, madd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * step)), xv.x[step]));
    return s;
  }
  struct WBlock {
    __m256i w[8];
  };
  __attribute__((target("avx2,fma"), always_inline)) static WBlock w_block(const uint8_t* w) {
    WBlock out;
    for (int step = 0; step < 8; ++step) out.w[step] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * step));
    return out;
  }
  __attribute__((target("avx2,fma"), always_inline)) static __m256i w_sum(const WBlock& wv, const int8_t* xq) {
    __m256i s = _mm256_setzero_si256();
    for (int step = 0; step < 8; ++step) {
      int32_t a;
      std::memcpy(&a, xq + 4 * step, 4);
      s = _mm256_add_epi32(s, madd(wv.w[step], _mm256_set1_epi32(a)));
    }
    return s;
  }
  __attribute__((target("avx2,fma"))) static __m256i zero_term8(const Panel&, int64_t, int, int32_t) {
    return _mm256_setzero_si256();
  }
  __attribute__((target("avx2,fma"))) static __m256 scale8(const Panel& p, int64_t g, int i) {
    return _mm256_loadu_ps(p.scales + g * kPanel + 8 * i);
  }
};

// ---- the kernels: rows [r0, r0 + rows) of x against a panel's 32 rows, into tile [rows][32] ----

template <class F>
void dot_scalar(const DotInput& in, int64_t r0, int rows, const typename F::Panel& p, float* tile) {
  const Q8Rows& x = in.x;
  const int64_t k = x.k, kb = k / kBlock;
  for (int r = 0; r < rows; ++r)
    for (int64_t c = 0; c < kPanel; ++c) {
      const int8_t* xq = x.q.data() + (r0 + r) * k;
      float acc = 0;
      for (int64_t b = 0; b < kb; ++b) {
        const int64_t g = b * kBlock / p.block_cols, xb = (r0 + r) * kb + b;
        int32_t v = 0;
        for (int64_t t = b * kBlock; t < (b + 1) * kBlock; ++t) v += F::value(p, t, c) * xq[t];
        v -= F::zero_term(p, g, c, x.sum[static_cast<size_t>(xb)]);
        const float sd = F::scale(p, g, c) * F::x_scale(x.d[static_cast<size_t>(xb)]);
        acc = std::fma(static_cast<float>(v), sd, acc);
      }
      tile[r * kPanel + c] = acc;
    }
}

// Block b of rows 8i…8i+7 (their bytes at w) against a row of x (its block xv, its Σq and d):
// acc += float(v) · scale · d, v the exact integer Σ (w − zero) · q of each lane.
template <class F>
__attribute__((target("avx2,fma"), always_inline)) inline __m256 dot_block(const typename F::XBlock& xv, int32_t xsum,
                                                                           float d, const typename F::Panel& p,
                                                                           int64_t g, int i, const uint8_t* w,
                                                                           __m256 acc) {
  const __m256i v = _mm256_sub_epi32(F::block_sum(xv, w), F::zero_term8(p, g, i, xsum));
  const __m256 sd = _mm256_mul_ps(F::scale8(p, g, i), _mm256_set1_ps(F::x_scale(d)));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), sd, acc);
}

// R rows of x against the panel's 32 rows, block after block (F::kBlockBytes, a quarter for
// each 8 rows): a lone row's block of x broadcast once for the 32 rows (decode: the weights
// stream from memory), several rows' x taken as it is used against each 8 rows' weights,
// unpacked once (prefill). The same integers and f32 operations either way: the same bits.
template <class F, int R>
__attribute__((target("avx2,fma"))) void dot_avx2(const DotInput& in, int64_t r0, int, const typename F::Panel& p,
                                                  float* tile) {
  const Q8Rows& x = in.x;
  const int64_t kb = x.k / kBlock;
  __m256 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 4; ++i) acc[r][i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < kb; ++b) {
    const int64_t g = in.group[static_cast<size_t>(b)];
    const uint8_t* w = p.q + b * F::kBlockBytes;
    for (int64_t line = 0; line < F::kBlockBytes / 64; ++line)
      _mm_prefetch(reinterpret_cast<const char*>(w + F::kAhead + 64 * line), _MM_HINT_T0);
    if constexpr (R == 1) {  // x's block broadcast once, for the 4 blocks of 8 rows
      const typename F::XBlock xv = F::x_block(in, r0, b);
      const size_t xb = static_cast<size_t>(r0 * kb + b);
      for (int i = 0; i < 4; ++i)
        acc[0][i] = dot_block<F>(xv, x.sum[xb], x.d[xb], p, g, i, w + F::kBlockBytes / 4 * i, acc[0][i]);
      continue;
    }
    for (int i = 0; i < 4; ++i) {  // each block of 8 rows unpacked once, for the R rows of x
      const typename F::WBlock wv = F::w_block(w + F::kBlockBytes / 4 * i);
      for (int r = 0; r < R; ++r) {
        const size_t xb = static_cast<size_t>((r0 + r) * kb + b);
        const __m256i v = _mm256_sub_epi32(F::w_sum(wv, x.q.data() + (r0 + r) * x.k + b * kBlock),
                                           F::zero_term8(p, g, i, x.sum[xb]));
        const __m256 sd = _mm256_mul_ps(F::scale8(p, g, i), _mm256_set1_ps(F::x_scale(x.d[xb])));
        acc[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), sd, acc[r][i]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 4; ++i) _mm256_storeu_ps(tile + r * kPanel + 8 * i, acc[r][i]);
}

template <class F>
using MicroDot = void (*)(const DotInput& in, int64_t r0, int rows, const typename F::Panel& p, float* tile);

template <class F>
void product(const char* what, const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows,
             int64_t block_cols, int64_t row0, int64_t o, float* out, const char* kernel) {
  LINNET_CHECK(int_dot_fits(k, block_cols) && padded_rows % kPanel == 0, what, ": ", k, " columns in groups of ",
               block_cols, " (whole blocks of 32 wanted), padded rows ", padded_rows);
  const std::string name = kernel ? kernel : int_dot_kernels().front();
  bool known = false;
  for (const char* kname : int_dot_kernels()) known |= name == kname;
  if (!known) throw Error(str(what, ": no integer dot product kernel '", name, "' on this CPU"));
  static thread_local DotInput buffer;
  DotInput& in = buffer;  // (a reference: the pool's threads read the caller's rows)
  quantize_rows_q8(x, n, k, in.x);
  in.group.resize(static_cast<size_t>(k / kBlock));
  for (int64_t b = 0; b < k / kBlock; ++b) in.group[static_cast<size_t>(b)] = static_cast<int32_t>(b * kBlock / block_cols);
  static const MicroDot<F> kAvx2[kRowsDot] = {dot_avx2<F, 1>, dot_avx2<F, 2>, dot_avx2<F, 3>, dot_avx2<F, 4>};
  const bool avx2 = name == "avx2";
  const int64_t panel_bytes = F::kBlockBytes * (k / kBlock);
  for_each_tile(n, k / 4, w, static_cast<size_t>(panel_bytes), row0, o, avx2 ? kRowsDot : 1, out,
                [&](int64_t r0, int rows, const void* panel, float* tile) {
                  const int64_t pi = (static_cast<const char*>(panel) - static_cast<const char*>(w)) / panel_bytes;
                  const typename F::Panel f = F::panel(w, padded_rows, k, block_cols, pi);
                  if (avx2)
                    kAvx2[rows - 1](in, r0, rows, f, tile);
                  else
                    dot_scalar<F>(in, r0, rows, f, tile);
                });
}

template <class F>
void unpack(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0, int64_t rows,
            float* dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = row0 + i;
    const typename F::Panel p = F::panel(packed, padded_rows, cols, block_cols, r / kPanel);
    for (int64_t t = 0; t < cols; ++t) dst[i * cols + t] = F::weight(p, t, r % kPanel);
  }
}

// One row's blocks: amax, d = amax / 127, q = round(x · (1/d)), Σq. The AVX2 one gives the same
// values (max, one multiply and round to nearest even are exact operations either way).
void quantize_row_scalar(const float* x, int64_t k, int8_t* q, float* d, int32_t* sum) {
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    float amax = 0;
    for (int64_t t = 0; t < kBlock; ++t) amax = std::max(amax, std::fabs(xb[t]));
    const float db = amax / 127.0f, id = db != 0 ? 1.0f / db : 0.0f;
    int32_t s = 0;
    for (int64_t t = 0; t < kBlock; ++t) {
      const int v = static_cast<int>(std::min(127.0f, std::max(-127.0f, std::nearbyint(xb[t] * id))));
      q[b * kBlock + t] = static_cast<int8_t>(v);
      s += v;
    }
    d[b] = db, sum[b] = s;
  }
}

__attribute__((target("avx2,fma"))) void quantize_row_avx2(const float* x, int64_t k, int8_t* q, float* d, int32_t* sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    float amax = 0;
    for (float l : lanes) amax = std::max(amax, l);
    const float db = amax / 127.0f, id = db != 0 ? 1.0f / db : 0.0f;
    __m256i s = _mm256_setzero_si256();
    alignas(32) int32_t qi[kBlock];
    for (int i = 0; i < 4; ++i) {
      const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[i], _mm256_set1_ps(id)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256i n = _mm256_cvttps_epi32(_mm256_min_ps(hi, _mm256_max_ps(lo, r)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(qi + 8 * i), n);
      s = _mm256_add_epi32(s, n);
    }
    for (int64_t t = 0; t < kBlock; ++t) q[b * kBlock + t] = static_cast<int8_t>(qi[t]);
    alignas(32) int32_t sl[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sl), s);
    d[b] = db, sum[b] = sl[0] + sl[1] + sl[2] + sl[3] + sl[4] + sl[5] + sl[6] + sl[7];
  }
}

}  // namespace

bool int_dot_fits(int64_t k, int64_t block_cols) { return k > 0 && k % kBlock == 0 && block_cols % kBlock == 0; }

bool int_dot_layout(int64_t k, int64_t block_cols) { return cpu_dot() == CpuDot::int8 && int_dot_fits(k, block_cols); }

std::vector<const char*> int_dot_kernels() {
  if (has_avx2()) return {"avx2", "scalar"};
  return {"scalar"};
}

void quantize_rows_q8(const float* x, int64_t n, int64_t k, Q8Rows& out) {
  LINNET_CHECK(k % kBlock == 0, "quantize_rows_q8: ", k, " columns, not whole blocks of 32");
  const int64_t kb = k / kBlock;
  out.k = k;
  out.q.resize(static_cast<size_t>(n * k));
  out.d.resize(static_cast<size_t>(n * kb));
  out.sum.resize(static_cast<size_t>(n * kb));
  static const bool avx2 = has_avx2();
#pragma omp parallel for if (n * k > 65536)
  for (int64_t r = 0; r < n; ++r) {
    const size_t at = static_cast<size_t>(r * kb);
    if (avx2)
      quantize_row_avx2(x + r * k, k, out.q.data() + r * k, out.d.data() + at, out.sum.data() + at);
    else
      quantize_row_scalar(x + r * k, k, out.q.data() + r * k, out.d.data() + at, out.sum.data() + at);
  }
}

void unpack_rows_int4_dot_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                              int64_t rows, float* dst) {
  unpack<Int4Dot>(packed, padded_rows, cols, block_cols, row0, rows, dst);
}
void unpack_rows_mxfp4_dot_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                               int64_t rows, float* dst) {
  unpack<Mxfp4Dot>(packed, padded_rows, cols, block_cols, row0, rows, dst);
}

void unpack_rows_int8_dot_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                              int64_t rows, float* dst) {
  unpack<Int8Dot>(packed, padded_rows, cols, block_cols, row0, rows, dst);
}

void packed_matmul_int8_dot(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows, int64_t block_cols,
                            int64_t row0, int64_t o, float* out, const char* kernel) {
  product<Int8Dot>("packed_matmul_int8_dot", x, n, k, w, padded_rows, block_cols, row0, o, out, kernel);
}

void packed_matmul_int4_dot(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows, int64_t block_cols,
                            int64_t row0, int64_t o, float* out, const char* kernel) {
  product<Int4Dot>("packed_matmul_int4_dot", x, n, k, w, padded_rows, block_cols, row0, o, out, kernel);
}
void packed_matmul_mxfp4_dot(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows,
                             int64_t block_cols, int64_t row0, int64_t o, float* out, const char* kernel) {
  product<Mxfp4Dot>("packed_matmul_mxfp4_dot", x, n, k, w, padded_rows, block_cols, row0, o, out, kernel);
}

}  // namespace linnet::cpu

#pragma GCC diagnostic pop
