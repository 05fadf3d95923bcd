#include "core/cpu/packed_matmul.h"

#include "core/cpu/packed_walk.h"

#include "core/error.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*().
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

namespace linnet::cpu {

namespace {

enum Kind { kF32 = 0, kBf16 = 1, kF16 = 2 };
Kind kind_of(DType dt) {
  if (dt == DType::f32) return kF32;
  if (dt == DType::bf16) return kBf16;
  if (dt == DType::f16) return kF16;
  throw Error(str("packed matrix: dtype ", dtype_name(dt), " is not f32, bf16 or f16"));
}

// Where column c of a panel's k-slice sits (bf16 interleaves c and c + 16 in one word).
int64_t slot_of(int64_t c, Kind kind) { return kind == kBf16 ? (c < 16 ? 2 * c : 2 * (c - 16) + 1) : c; }

// A tile: rows × 32 f32 results of one panel, row-major with stride 32.
using Micro = void (*)(const float* x, int64_t ldx, int64_t k, const void* panel, int rows, float* tile);

// ---- scalar: the reference the vector kernels equal bit for bit ----
float load_scalar(const void* panel, Kind kind, int64_t i) {
  if (kind == kF32) return static_cast<const float*>(panel)[i];
  const uint16_t h = static_cast<const uint16_t*>(panel)[i];
  return kind == kBf16 ? bf16_to_f32(h) : f16_to_f32(h);
}

template <Kind K>
void micro_scalar(const float* x, int64_t ldx, int64_t k, const void* panel, int rows, float* tile) {
  for (int r = 0; r < rows; ++r)
    for (int64_t c = 0; c < kPanel; ++c) {
      float sum = 0;
      for (int q = 0; q < kChains; ++q) {
        float acc = 0;
        for (int64_t t = chain_begin(k, q); t < chain_begin(k, q + 1); ++t)
          acc = std::fma(x[r * ldx + t], load_scalar(panel, K, t * kPanel + slot_of(c, K)), acc);
        sum = q == 0 ? acc : sum + acc;
      }
      tile[r * kPanel + c] = sum;
    }
}

// ---- AVX-512: R rows × 2 vectors of 16 accumulators; x broadcast from memory ----
template <Kind K>
__attribute__((target("avx512f"))) inline void widen32(const void* panel, int64_t t, __m512& lo, __m512& hi) {
  if constexpr (K == kF32) {
    const float* p = static_cast<const float*>(panel) + t * kPanel;
    lo = _mm512_loadu_ps(p);
    hi = _mm512_loadu_ps(p + 16);
  } else if constexpr (K == kBf16) {
    const __m512i v = _mm512_loadu_si512(static_cast<const uint16_t*>(panel) + t * kPanel);
    lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    hi = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(panel) + t * kPanel;
    lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
  }
}

// One step t of a chain for R rows: 32 weights widened, R × 2 multiply-adds.
template <Kind K, int R>
__attribute__((target("avx512f"), always_inline)) inline void chain_step(const float* x, int64_t ldx, const void* panel,
                                                                          int64_t t, __m512 (&a)[R][2]) {
  constexpr int64_t kBytes = K == kF32 ? 4 : 2;
  // 4 KiB (bf16) ahead on each stream: the hardware prefetcher alone lags at few rows.
  if (cpu_prefetch()) _mm_prefetch(static_cast<const char*>(panel) + (t * kPanel + 2048) * kBytes, _MM_HINT_T0);
  __m512 lo, hi;
  widen32<K>(panel, t, lo, hi);
  for (int r = 0; r < R; ++r) {
    const __m512 xv = _mm512_set1_ps(x[r * ldx + t]);
    a[r][0] = _mm512_fmadd_ps(xv, lo, a[r][0]);
    a[r][1] = _mm512_fmadd_ps(xv, hi, a[r][1]);
  }
}

// G of the kChains chains at once (G > 1 for few rows: the chains' latencies overlap, where
// one row alone would wait on each multiply-add), each added into the tile in chain order.
template <Kind K, int R, int G>
__attribute__((target("avx512f"))) void micro_avx512(const float* x, int64_t ldx, int64_t k, const void* panel, int,
                                                      float* tile) {
  for (int q0 = 0; q0 < kChains; q0 += G) {
    __m512 a[G][R][2];
    int64_t begin[G], len[G], common = k;
    for (int g = 0; g < G; ++g) {
      begin[g] = chain_begin(k, q0 + g);
      len[g] = chain_begin(k, q0 + g + 1) - begin[g];
      common = std::min(common, len[g]);
      for (int r = 0; r < R; ++r) a[g][r][0] = a[g][r][1] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < common; ++i)
      for (int g = 0; g < G; ++g) chain_step<K, R>(x, ldx, panel, begin[g] + i, a[g]);
    for (int g = 0; g < G; ++g)
      for (int64_t i = common; i < len[g]; ++i) chain_step<K, R>(x, ldx, panel, begin[g] + i, a[g]);
    for (int g = 0; g < G; ++g)
      for (int r = 0; r < R; ++r)
        for (int h = 0; h < 2; ++h) {
          float* o = tile + r * kPanel + 16 * h;
          _mm512_storeu_ps(o, q0 + g == 0 ? a[g][r][h] : _mm512_add_ps(_mm512_loadu_ps(o), a[g][r][h]));
        }
  }
}

// ---- AVX2 + FMA: R rows × 4 vectors of 8 ----
template <Kind K>
__attribute__((target("avx2,fma,f16c"))) inline void widen8x4(const void* panel, int64_t t, __m256 w[4]) {
  if constexpr (K == kF32) {
    const float* p = static_cast<const float*>(panel) + t * kPanel;
    for (int i = 0; i < 4; ++i) w[i] = _mm256_loadu_ps(p + 8 * i);
  } else if constexpr (K == kBf16) {
    // Words j of the two halves hold columns (j, j + 16) and (8 + j, 24 + j).
    const __m256i mask = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    const uint16_t* p = static_cast<const uint16_t*>(panel) + t * kPanel;
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16));
    w[0] = _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16));   // columns 0–7
    w[1] = _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16));   // 8–15
    w[2] = _mm256_castsi256_ps(_mm256_and_si256(v0, mask));  // 16–23
    w[3] = _mm256_castsi256_ps(_mm256_and_si256(v1, mask));  // 24–31
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(panel) + t * kPanel;
    for (int i = 0; i < 4; ++i) w[i] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 * i)));
  }
}

template <Kind K, int R>
__attribute__((target("avx2,fma,f16c"))) void micro_avx2(const float* x, int64_t ldx, int64_t k, const void* panel, int,
                                                          float* tile) {
  constexpr int64_t kBytes = K == kF32 ? 4 : 2;
  for (int q = 0; q < kChains; ++q) {
    __m256 a[R][4];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < 4; ++i) a[r][i] = _mm256_setzero_ps();
    for (int64_t t = chain_begin(k, q); t < chain_begin(k, q + 1); ++t) {
      if (cpu_prefetch()) _mm_prefetch(static_cast<const char*>(panel) + (t * kPanel + 2048) * kBytes, _MM_HINT_T0);
      __m256 w[4];
      widen8x4<K>(panel, t, w);
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_broadcast_ss(x + r * ldx + t);
        for (int i = 0; i < 4; ++i) a[r][i] = _mm256_fmadd_ps(xv, w[i], a[r][i]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < 4; ++i) {
        float* o = tile + r * kPanel + 8 * i;
        _mm256_storeu_ps(o, q == 0 ? a[r][i] : _mm256_add_ps(_mm256_loadu_ps(o), a[r][i]));
      }
  }
}

// ---- AVX512_BF16 (LINNET_CPU_DOT=bf16): x rounded to bf16, two k steps a dot-product instruction ----
// Another family of bits, batch invariant of its own: each output element is ((c0 + c1) + c2) +
// c3, chain q a run of vdpbf16ps steps over its fixed quarter of the k *pairs* (t, t + 1) in
// order from 0 — whatever the rows, the tile or the thread. Each step adds x[t]·w[t] + x[t+1]·w[t+1]
// (bf16 products, exact in f32) into the f32 lane. xp: each row's pairs (bf16(x[t]) in the low half,
// bf16(x[t+1]) in the high; 0 past k), ldp pairs a row.
// Chain q's first pair of P.
inline int64_t pair_chain_begin(int64_t pairs, int q) { return pairs * q / kChains; }

template <int R>
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) inline void dot_step(
    const uint32_t* xp, int64_t ldp, const void* panel, int64_t k, int64_t i, __m512 (&a)[R][2]) {
  const int64_t t = 2 * i;
  const uint16_t* p = static_cast<const uint16_t*>(panel) + t * kPanel;
  // 4 KiB ahead, as the f32 path: both 64-byte lines of this step's pair.
  if (cpu_prefetch()) _mm_prefetch(reinterpret_cast<const char*>(p + 2048), _MM_HINT_T0);
  if (cpu_prefetch()) _mm_prefetch(reinterpret_cast<const char*>(p + 2048 + kPanel), _MM_HINT_T0);
  // Word j of step t holds columns (j, j + 16); the pairs (t, t + 1) of column j and of j + 16.
  const __m512i v0 = _mm512_loadu_si512(p);
  const __m512i v1 = t + 1 < k ? _mm512_loadu_si512(p + kPanel) : _mm512_setzero_si512();
  const __m512i low = _mm512_set1_epi32(0xFFFF), high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512i lo = _mm512_or_si512(_mm512_and_si512(v0, low), _mm512_slli_epi32(v1, 16));
  const __m512i hi = _mm512_or_si512(_mm512_srli_epi32(v0, 16), _mm512_and_si512(v1, high));
  for (int r = 0; r < R; ++r) {
    const __m512i xv = _mm512_set1_epi32(static_cast<int>(xp[r * ldp + i]));
    a[r][0] = _mm512_dpbf16_ps(a[r][0], (__m512bh)xv, (__m512bh)lo);
    a[r][1] = _mm512_dpbf16_ps(a[r][1], (__m512bh)xv, (__m512bh)hi);
  }
}

template <int R, int G>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void micro_dot(const uint32_t* xp, int64_t ldp, int64_t k,
                                                                      const void* panel, float* tile) {
  const int64_t pairs = (k + 1) / 2;
  for (int q0 = 0; q0 < kChains; q0 += G) {
    __m512 a[G][R][2];
    int64_t begin[G], len[G], common = pairs;
    for (int g = 0; g < G; ++g) {
      begin[g] = pair_chain_begin(pairs, q0 + g);
      len[g] = pair_chain_begin(pairs, q0 + g + 1) - begin[g];
      common = std::min(common, len[g]);
      for (int r = 0; r < R; ++r) a[g][r][0] = a[g][r][1] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < common; ++i)
      for (int g = 0; g < G; ++g) dot_step<R>(xp, ldp, panel, k, begin[g] + i, a[g]);
    for (int g = 0; g < G; ++g)
      for (int64_t i = common; i < len[g]; ++i) dot_step<R>(xp, ldp, panel, k, begin[g] + i, a[g]);
    for (int g = 0; g < G; ++g)
      for (int r = 0; r < R; ++r)
        for (int h = 0; h < 2; ++h) {
          float* o = tile + r * kPanel + 16 * h;
          _mm512_storeu_ps(o, q0 + g == 0 ? a[g][r][h] : _mm512_add_ps(_mm512_loadu_ps(o), a[g][r][h]));
        }
  }
}

using MicroDot = void (*)(const uint32_t* xp, int64_t ldp, int64_t k, const void* panel, float* tile);

// Chains run at once for a tile of R rows: enough independent multiply-adds in flight.
constexpr int chains_at_once(int rows) { return rows == 1 ? 4 : rows == 2 ? 2 : 1; }
template <Kind K, int... R>
constexpr std::array<Micro, sizeof...(R)> table512(std::integer_sequence<int, R...>) {
  return {micro_avx512<K, R + 1, chains_at_once(R + 1)>...};
}
template <Kind K, int... R>
constexpr std::array<Micro, sizeof...(R)> table2(std::integer_sequence<int, R...>) {
  return {micro_avx2<K, R + 1>...};
}

template <int... R>
constexpr std::array<MicroDot, sizeof...(R)> table_dot(std::integer_sequence<int, R...>) {
  return {micro_dot<R + 1, chains_at_once(R + 1)>...};
}

struct Kernel {
  const char* name;
  int max_rows;
  std::vector<Micro> by_rows[3];  // [kind][rows − 1]
};

std::vector<Kernel> available() {
  __builtin_cpu_init();
  std::vector<Kernel> out;
  if (__builtin_cpu_supports("avx512f")) {
    Kernel k{"avx512f", kRows512, {}};
    auto put = [&](Kind kind, auto table) { k.by_rows[kind].assign(table.begin(), table.end()); };
    put(kF32, table512<kF32>(std::make_integer_sequence<int, kRows512>{}));
    put(kBf16, table512<kBf16>(std::make_integer_sequence<int, kRows512>{}));
    put(kF16, table512<kF16>(std::make_integer_sequence<int, kRows512>{}));
    out.push_back(std::move(k));
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    Kernel k{"avx2+fma", kRows2, {}};
    auto put = [&](Kind kind, auto table) { k.by_rows[kind].assign(table.begin(), table.end()); };
    put(kF32, table2<kF32>(std::make_integer_sequence<int, kRows2>{}));
    put(kBf16, table2<kBf16>(std::make_integer_sequence<int, kRows2>{}));
    put(kF16, table2<kF16>(std::make_integer_sequence<int, kRows2>{}));
    out.push_back(std::move(k));
  }
  Kernel s{"scalar", 1, {{micro_scalar<kF32>}, {micro_scalar<kBf16>}, {micro_scalar<kF16>}}};
  out.push_back(std::move(s));
  return out;
}

const std::vector<Kernel> kKernels = available();

const Kernel& find_kernel(const char* name) {
  if (!name) return kKernels.front();
  for (const Kernel& k : kKernels)
    if (std::string(k.name) == name) return k;
  throw Error(str("packed_matmul: no kernel '", name, "' on this CPU"));
}

}  // namespace

size_t packed_bytes(int64_t rows, int64_t cols, DType dt) {
  const int64_t panels = (rows + kPanel - 1) / kPanel;
  return static_cast<size_t>(panels * kPanel * cols) * dtype_size(dt);
}

namespace {
template <class E>
void pack_typed(const E* src, Kind kind, int64_t rows, int64_t cols, int64_t p0, int64_t p1, E* dst) {
  constexpr int64_t kBlock = 64;  // k-slices at a time: 32 rows × 64 in, 64 lines out, all in L1
#pragma omp parallel for schedule(static)
  for (int64_t p = p0; p < p1; ++p) {
    E* out = dst + p * kPanel * cols;
    const int64_t real = std::min<int64_t>(kPanel, rows - p * kPanel);  // the last panel's rows past the end stay zero
    if (real < kPanel) std::fill(out, out + kPanel * cols, E{0});
    for (int64_t t0 = 0; t0 < cols; t0 += kBlock) {
      const int64_t t1 = std::min(cols, t0 + kBlock);
      for (int64_t c = 0; c < real; ++c) {
        const E* in = src + (p * kPanel + c) * cols;
        E* o = out + slot_of(c, kind);
        for (int64_t t = t0; t < t1; ++t) o[t * kPanel] = in[t];
      }
    }
  }
}
}  // namespace

void pack_panels(const void* src, DType dt, int64_t rows, int64_t cols, int64_t p0, int64_t p1, void* dst) {
  const Kind kind = kind_of(dt);
  if (kind == kF32)
    pack_typed(static_cast<const uint32_t*>(src), kind, rows, cols, p0, p1, static_cast<uint32_t*>(dst));
  else
    pack_typed(static_cast<const uint16_t*>(src), kind, rows, cols, p0, p1, static_cast<uint16_t*>(dst));
}

void unpack_rows(const void* packed, DType dt, int64_t cols, int64_t row0, int64_t rows, void* dst) {
  const Kind kind = kind_of(dt);
  const size_t es = dtype_size(dt);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = row0 + i, p = r / kPanel, s = slot_of(r % kPanel, kind);
    const char* in = static_cast<const char*>(packed) + static_cast<size_t>(p * kPanel * cols + s) * es;
    char* out = static_cast<char*>(dst) + static_cast<size_t>(i * cols) * es;
    for (int64_t t = 0; t < cols; ++t) std::memcpy(out + t * es, in + static_cast<size_t>(t * kPanel) * es, es);
  }
}

void unpack_rows_f32(const void* packed, DType dt, int64_t cols, int64_t row0, int64_t rows, float* dst) {
  const Kind kind = kind_of(dt);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = row0 + i, p = r / kPanel, s = slot_of(r % kPanel, kind);
    const int64_t base = p * kPanel * cols + s;
    for (int64_t t = 0; t < cols; ++t) dst[i * cols + t] = load_scalar(packed, kind, base + t * kPanel);
  }
}


bool read_cpu_prefetch() {
  const char* v = std::getenv("LINNET_CPU_PREFETCH");
  if (!v || std::string(v) == "1") return true;
  if (std::string(v) == "0") return false;
  throw Error(str("LINNET_CPU_PREFETCH=", v, ": expected 1 or 0"));
}

bool has_bf16_dot() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
}

CpuDot cpu_dot() {
  static const CpuDot dot = [] {
    const char* v = std::getenv("LINNET_CPU_DOT");
    if (!v || std::string(v) == "f32") return CpuDot::f32;
    if (std::string(v) == "bf16") return CpuDot::bf16;
    if (std::string(v) == "int8") return CpuDot::int8;
    throw Error(str("LINNET_CPU_DOT=", v, ": expected f32, bf16 or int8"));
  }();
  return dot;
}

void packed_matmul_bf16_dot(const float* x, int64_t n, int64_t k, const void* w, int64_t row0, int64_t o, float* out) {
  if (!has_bf16_dot()) throw Error("packed_matmul: this CPU has no AVX512_BF16 dot product (LINNET_CPU_DOT=bf16)");
  static const std::vector<MicroDot> kDot = [] {
    const auto t = table_dot(std::make_integer_sequence<int, kRows512>{});
    return std::vector<MicroDot>(t.begin(), t.end());
  }();
  const int64_t pairs = (k + 1) / 2;
  // Each row's activations as bf16 pairs, once a call (round to nearest even, as transformers'
  // bf16 activations are).
  std::vector<uint32_t> xp(static_cast<size_t>(n * pairs));
#pragma omp parallel for if (n * k > 65536)
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < pairs; ++i) {
      const uint32_t a = f32_to_bf16(x[r * k + 2 * i]), b = 2 * i + 1 < k ? f32_to_bf16(x[r * k + 2 * i + 1]) : 0;
      xp[static_cast<size_t>(r * pairs + i)] = a | (b << 16);
    }
  for_each_tile(n, pairs, w, static_cast<size_t>(kPanel * k) * sizeof(uint16_t), row0, o, kRows512, out,
                [&](int64_t r0, int rows, const void* panel, float* tile) {
                  kDot[static_cast<size_t>(rows - 1)](xp.data() + r0 * pairs, pairs, k, panel, tile);
                });
}

void packed_matmul(const float* x, int64_t n, int64_t k, const void* w, DType dt, int64_t row0, int64_t o,
                   float* out, const char* kernel) {
  const Kind kind = kind_of(dt);
  if (!kernel && kind == kBf16 && cpu_dot() == CpuDot::bf16) {
    packed_matmul_bf16_dot(x, n, k, w, row0, o, out);
    return;
  }
  const Kernel& kern = find_kernel(kernel);
  for_each_tile(n, k, w, static_cast<size_t>(kPanel * k) * dtype_size(dt), row0, o, kern.max_rows, out,
                [&](int64_t r0, int rows, const void* panel, float* tile) {
                  kern.by_rows[kind][kern.max_rows == 1 ? 0 : rows - 1](x + r0 * k, k, k, panel, rows, tile);
                });
}

F32Tile f32_tile(const char* kernel) {
  const Kernel& k = find_kernel(kernel);
  return {k.max_rows, k.by_rows[kF32].data()};
}

const char* packed_matmul_kernel() { return kKernels.front().name; }

std::vector<const char*> packed_matmul_kernels() {
  std::vector<const char*> names;
  for (const Kernel& k : kKernels) names.push_back(k.name);
  return names;
}

}  // namespace linnet::cpu
