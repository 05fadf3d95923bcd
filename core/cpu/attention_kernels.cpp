#include "core/cpu/attention_kernels.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*().
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace linnet::cpu {

namespace {

// ---- portable: the reference ----
void scores_portable(const float* q, const float* keys, int64_t ldk, int64_t count, int64_t d, float scale, float* s) {
  for (int64_t j = 0; j < count; ++j) {
    const float* k = keys + j * ldk;
    float acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < d; ++i) acc += q[i] * k[i];
    s[j] = acc * scale;
  }
}

float softmax_portable(float* s, int64_t count) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < count; ++j) mx = std::max(mx, s[j]);
  double sum = 0;
  for (int64_t j = 0; j < count; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  return static_cast<float>(1.0 / sum);
}

void combine_portable(const float* s, const float* const* values, int64_t count, int64_t d, float inv, float* out) {
  std::fill(out, out + d, 0.0f);
  for (int64_t j = 0; j < count; ++j) {
    const float p = s[j] * inv;
    const float* v = values[j];
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) out[i] += p * v[i];
  }
}

// ---- AVX-512 ----
#define LINNET_AVX512 __attribute__((target("avx512f")))

LINNET_AVX512 inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

void LINNET_AVX512 scores_avx512(const float* q, const float* keys, int64_t ldk, int64_t count, int64_t d, float scale,
                                 float* s) {
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {  // four keys share each load of q
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const float* k = keys + j * ldk;
    for (int64_t i = 0; i < d; i += 16) {
      const __mmask16 m = tail_mask(d - i);
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + i);
      a0 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k + i), a0);
      a1 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k + ldk + i), a1);
      a2 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k + 2 * ldk + i), a2);
      a3 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k + 3 * ldk + i), a3);
    }
    s[j] = _mm512_reduce_add_ps(a0) * scale;
    s[j + 1] = _mm512_reduce_add_ps(a1) * scale;
    s[j + 2] = _mm512_reduce_add_ps(a2) * scale;
    s[j + 3] = _mm512_reduce_add_ps(a3) * scale;
  }
  for (; j < count; ++j) {
    __m512 a = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 16) {
      const __mmask16 m = tail_mask(d - i);
      a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), _mm512_maskz_loadu_ps(m, keys + j * ldk + i), a);
    }
    s[j] = _mm512_reduce_add_ps(a) * scale;
  }
}

// exp(x) for x ≤ 0 (scores less their max): x = n·ln2 + r, |r| ≤ ln2/2, a degree-7 Taylor
// polynomial for exp(r) (error below an f32 ulp there), then × 2ⁿ. Below −88 it is 0. A NaN
// stays NaN (as in the reference): vmaxps returns its second operand when either is NaN.
LINNET_AVX512 inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-88.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln2 in two parts (Cody–Waite)
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

float LINNET_AVX512 softmax_avx512(float* s, int64_t count) {
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < count; j += 16)
    mx = _mm512_mask_max_ps(mx, tail_mask(count - j), mx, _mm512_maskz_loadu_ps(tail_mask(count - j), s + j));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < count; j += 16) {
    const __mmask16 t = tail_mask(count - j);
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(t, s + j), m));
    _mm512_mask_storeu_ps(s + j, t, e);
    sum = _mm512_mask_add_ps(sum, t, sum, e);
  }
  return 1.0f / _mm512_reduce_add_ps(sum);
}

// Head dim in chunks of up to 8 vectors (128 floats) held in registers over all the values.
template <int V>
LINNET_AVX512 void combine_chunk(const float* s, const float* const* values, int64_t count, int64_t i0, int64_t d,
                                 float inv, float* out) {
  __m512 a[V];
  __mmask16 m[V];
  for (int v = 0; v < V; ++v) {
    a[v] = _mm512_setzero_ps();
    m[v] = tail_mask(d - i0 - 16 * v);
  }
  for (int64_t j = 0; j < count; ++j) {
    const __m512 p = _mm512_set1_ps(s[j] * inv);
    const float* x = values[j] + i0;
    for (int v = 0; v < V; ++v) a[v] = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(m[v], x + 16 * v), a[v]);
  }
  for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(out + i0 + 16 * v, m[v], a[v]);
}

void LINNET_AVX512 combine_avx512(const float* s, const float* const* values, int64_t count, int64_t d, float inv,
                                  float* out) {
  using Chunk = void (*)(const float*, const float* const*, int64_t, int64_t, int64_t, float, float*);
  static constexpr Chunk kChunks[8] = {combine_chunk<1>, combine_chunk<2>, combine_chunk<3>, combine_chunk<4>,
                                       combine_chunk<5>, combine_chunk<6>, combine_chunk<7>, combine_chunk<8>};
  for (int64_t i0 = 0; i0 < d; i0 += 128) {
    const int64_t vectors = std::min<int64_t>(8, (d - i0 + 15) / 16);
    kChunks[vectors - 1](s, values, count, i0, d, inv, out);
  }
}

#undef LINNET_AVX512

const AttentionKernels kPortable{"portable", scores_portable, softmax_portable, combine_portable};
const AttentionKernels kAvx512{"avx512f", scores_avx512, softmax_avx512, combine_avx512};

std::vector<const AttentionKernels*> detect() {
  __builtin_cpu_init();
  std::vector<const AttentionKernels*> k;
  if (__builtin_cpu_supports("avx512f")) k.push_back(&kAvx512);
  k.push_back(&kPortable);
  return k;
}

}  // namespace

std::vector<const AttentionKernels*> all_attention_kernels() {
  static const std::vector<const AttentionKernels*> kAll = detect();
  return kAll;
}

const AttentionKernels& attention_kernels() { return *all_attention_kernels().front(); }

}  // namespace linnet::cpu
