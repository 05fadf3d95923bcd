#include "core/cpu/half_matmul.h"

#include "core/error.h"

#include <cblas.h>
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*().
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

namespace linnet::cpu {

namespace {

// Up to this many rows of x, the weights are streamed once and widened in registers; past
// it, sgemm on widened blocks is faster (the widening is then a small share of the work).
constexpr int64_t kFewRows = 16;
constexpr int kTile = 4;  // a tile: up to 4 rows of x × 4 weight rows, 16 accumulators

float widen(uint16_t h, bool bf16) { return bf16 ? bf16_to_f32(h) : f16_to_f32(h); }

// out[r·ldo + c] = x_r · w_c for r < rows, c < cols (both ≤ kTile): the scalar reference.
void tile_scalar(const float* x, int rows, int64_t in, const uint16_t* w, int cols, bool bf16, float* out, int64_t ldo) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      float s = 0;
      for (int64_t k = 0; k < in; ++k) s += x[r * in + k] * widen(w[c * in + k], bf16);
      out[r * ldo + c] = s;
    }
}

__attribute__((target("avx512f"))) inline __m512 widen16(const uint16_t* p, bool bf16) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
}

// R × C accumulators in registers (a template, so none spills): each 16 weights widened once
// serve R rows, each 16 of x serve C weight rows. Software prefetch 1 KiB ahead on every
// weight row: the hardware prefetcher alone left decode at half the bandwidth f32 reached.
template <int R, int C>
__attribute__((target("avx512f"))) void tile_avx512_rc(const float* x, int64_t in, const uint16_t* w, bool bf16,
                                                        float* out, int64_t ldo) {
  __m512 a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a[r][c] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= in; k += 16) {
    __m512 wv[C];
    for (int c = 0; c < C; ++c) {
      _mm_prefetch(reinterpret_cast<const char*>(w + c * in + k + 512), _MM_HINT_T0);
      wv[c] = widen16(w + c * in + k, bf16);
    }
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * in + k);
      for (int c = 0; c < C; ++c) a[r][c] = _mm512_fmadd_ps(xv, wv[c], a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float s = _mm512_reduce_add_ps(a[r][c]);
      for (int64_t t = k; t < in; ++t) s += x[r * in + t] * widen(w[c * in + t], bf16);
      out[r * ldo + c] = s;
    }
}

__attribute__((target("avx2,fma,f16c"))) inline __m256 widen8(const uint16_t* p, bool bf16) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
}

template <int R, int C>
__attribute__((target("avx2,fma,f16c"))) void tile_avx2_rc(const float* x, int64_t in, const uint16_t* w, bool bf16,
                                                            float* out, int64_t ldo) {
  __m256 a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a[r][c] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= in; k += 8) {
    __m256 wv[C];
    for (int c = 0; c < C; ++c) {
      if (k % 32 == 0) _mm_prefetch(reinterpret_cast<const char*>(w + c * in + k + 512), _MM_HINT_T0);
      wv[c] = widen8(w + c * in + k, bf16);
    }
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * in + k);
      for (int c = 0; c < C; ++c) a[r][c] = _mm256_fmadd_ps(xv, wv[c], a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      const __m128 q = _mm_add_ps(_mm256_castps256_ps128(a[r][c]), _mm256_extractf128_ps(a[r][c], 1));
      const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
      float s = _mm_cvtss_f32(_mm_add_ss(p, _mm_shuffle_ps(p, p, 1)));
      for (int64_t t = k; t < in; ++t) s += x[r * in + t] * widen(w[c * in + t], bf16);
      out[r * ldo + c] = s;
    }
}

using Tile = void (*)(const float*, int, int64_t, const uint16_t*, int, bool, float*, int64_t);
using TileRC = void (*)(const float*, int64_t, const uint16_t*, bool, float*, int64_t);

// The 16 shapes of a tile, instantiated; index [rows − 1][cols − 1].
#define LINNET_TILE_TABLE(fn)                                                                      \
  {{fn<1, 1>, fn<1, 2>, fn<1, 3>, fn<1, 4>}, {fn<2, 1>, fn<2, 2>, fn<2, 3>, fn<2, 4>},              \
   {fn<3, 1>, fn<3, 2>, fn<3, 3>, fn<3, 4>}, {fn<4, 1>, fn<4, 2>, fn<4, 3>, fn<4, 4>}}
const TileRC kAvx512[kTile][kTile] = LINNET_TILE_TABLE(tile_avx512_rc);
const TileRC kAvx2[kTile][kTile] = LINNET_TILE_TABLE(tile_avx2_rc);
#undef LINNET_TILE_TABLE

void tile_avx512(const float* x, int rows, int64_t in, const uint16_t* w, int cols, bool bf16, float* out, int64_t ldo) {
  kAvx512[rows - 1][cols - 1](x, in, w, bf16, out, ldo);
}
void tile_avx2(const float* x, int rows, int64_t in, const uint16_t* w, int cols, bool bf16, float* out, int64_t ldo) {
  kAvx2[rows - 1][cols - 1](x, in, w, bf16, out, ldo);
}

struct Kernel {
  const char* name;
  Tile tile;
};

std::vector<Kernel> available() {
  __builtin_cpu_init();
  std::vector<Kernel> k;
  if (__builtin_cpu_supports("avx512f")) k.push_back({"avx512f", tile_avx512});
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    k.push_back({"avx2+f16c", tile_avx2});
  k.push_back({"scalar", tile_scalar});
  return k;
}

const std::vector<Kernel> kKernels = available();

// Threads over blocks of 4 weight rows; each block against every group of 4 rows of x.
void few_rows(Tile tile, const float* x, int64_t n, int64_t in, const uint16_t* w, bool bf16, int64_t o, float* out) {
  const int64_t blocks = (o + kTile - 1) / kTile;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j = b * kTile;
    const int cols = static_cast<int>(std::min<int64_t>(kTile, o - j));
    for (int64_t r0 = 0; r0 < n; r0 += kTile)
      tile(x + r0 * in, static_cast<int>(std::min<int64_t>(kTile, n - r0)), in, w + j * in, cols, bf16, out + r0 * o + j, o);
  }
}

// Blocks of weight rows widened (in parallel) into one buffer, then sgemm on each block.
void many_rows(const float* x, int64_t n, int64_t in, const uint16_t* w, DType dt, int64_t o, float* out) {
  const int64_t block = std::max<int64_t>(1, std::min<int64_t>(o, (1 << 20) / std::max<int64_t>(in, 1)));  // 4 MiB of f32: still in cache when sgemm reads it
  std::vector<float> buf(static_cast<size_t>(block * in));
  for (int64_t j0 = 0; j0 < o; j0 += block) {
    const int64_t rows = std::min(block, o - j0);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) convert(w + (j0 + r) * in, dt, buf.data() + r * in, DType::f32, static_cast<size_t>(in));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(rows), static_cast<int>(in),
                1.0f, x, static_cast<int>(in), buf.data(), static_cast<int>(in), 0.0f, out + j0, static_cast<int>(o));
  }
}

}  // namespace

void half_matmul(const float* x, int64_t n, int64_t in, const uint16_t* w, DType w_dtype, int64_t o, float* out,
                 const char* kernel) {
  if (n > kFewRows && !kernel) return many_rows(x, n, in, w, w_dtype, o, out);
  Tile tile = kKernels.front().tile;
  if (kernel) {
    auto it = std::find_if(kKernels.begin(), kKernels.end(), [&](const Kernel& k) { return std::string(k.name) == kernel; });
    if (it == kKernels.end()) throw Error(str("half_matmul: no kernel '", kernel, "' on this CPU"));
    tile = it->tile;
  }
  few_rows(tile, x, n, in, w, w_dtype == DType::bf16, o, out);
}

const char* half_matmul_kernel() { return kKernels.front().name; }

std::vector<const char*> half_matmul_kernels() {
  std::vector<const char*> names;
  for (const Kernel& k : kKernels) names.push_back(k.name);
  return names;
}

}  // namespace linnet::cpu
