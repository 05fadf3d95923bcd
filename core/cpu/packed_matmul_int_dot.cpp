// The integer dot products of 4- and 8-bit weights (LINNET_CPU_DOT=int8; core/cpu/packed_matmul.h):
// each row of x quantized per block of 32 columns as llama.cpp's Q8_0 is, then the CPU's integer
// products over a block (AVX2's, or VNNI's where the CPU has them: packed_matmul_int_dot_vnni.cpp),
// exact, and one f32 multiply-add a block and output, in block order. The scalar kernel does the
// same operations; every kernel gives the same bits for every n and tile (batch invariant). The
// SIMD kernels are written once (int_dot_simd.inc) and built for each instruction set.
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

#include "core/cpu/int_dot_kernels.h"
#include "core/cpu/packed_matmul.h"
#include "core/cpu/packed_quantized.h"
#include "core/cpu/packed_walk.h"
#include "core/error.h"

namespace linnet::cpu {

namespace intdot {
#define LINNET_DOT_NS avx2
#define LINNET_DOT_TARGET "avx2,fma"
#define LINNET_DOT_VNNI 0
#include "core/cpu/int_dot_simd.inc"
#undef LINNET_DOT_NS
#undef LINNET_DOT_TARGET
#undef LINNET_DOT_VNNI
}  // namespace intdot

namespace {

using namespace intdot;
using quantized::ceil_div;
using avx2::Int4Dot, avx2::Int8Dot, avx2::Mxfp4Dot;  // (their scalar parts are every set's)

bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
bool has_avx512vnni() {
  __builtin_cpu_init();
  return has_avx2() && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
}
bool has_avxvnni() {
  __builtin_cpu_init();
  return has_avx2() && __builtin_cpu_supports("avxvnni");
}

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
  static const Kernels kAvx2 = avx2::kernels(), kAvx512Vnni = avx512vnni::kernels(), kAvxVnni = avxvnni::kernels();
  const Kernels* simd = name == "avx512vnni" ? &kAvx512Vnni : name == "avxvnni" ? &kAvxVnni : name == "avx2" ? &kAvx2
                                                                                                          : nullptr;
  const int64_t panel_bytes = F::kBlockBytes * (k / kBlock);
  for_each_tile(n, k / 4, w, static_cast<size_t>(panel_bytes), row0, o, simd ? kRowsDot : 1, out,
                [&](int64_t r0, int rows, const void* panel, float* tile) {
                  const int64_t pi = (static_cast<const char*>(panel) - static_cast<const char*>(w)) / panel_bytes;
                  const typename F::Panel f = F::panel(w, padded_rows, k, block_cols, pi);
                  if (simd)
                    F::of(*simd)[rows - 1](in, r0, rows, f, tile);
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
  std::vector<const char*> names;
  if (has_avx512vnni()) names.push_back("avx512vnni");
  if (has_avxvnni()) names.push_back("avxvnni");
  if (has_avx2()) names.push_back("avx2");
  names.push_back("scalar");
  return names;
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
