// Attention on the CPU: causal attention among a call's fresh tokens (packed runs), and
// attention over the KV cache through a page table. Softmax in f32 with the max subtracted;
// one (token, head) pair per task, its loops in core/cpu/attention_kernels.h. A token's result
// depends only on its own keys and values, whatever else the call holds.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu/attention_kernels.h"
#include "core/cpu/cpu_backend.h"

namespace linnet {

namespace {

// Where a flat slot lives: (cache row, position).
struct CacheAddress {
  int64_t row, pos;
};
CacheAddress slot_address(int64_t slot, const AttentionDims& d) {
  const int64_t page = slot / d.page_size, ppr = d.pages_per_row();
  return {page / ppr, (page % ppr) * d.page_size + slot % d.page_size};
}

// Shapes are checked before (core/op_checks.h); the CPU computes in f32.
void check_dims(const Tensor& qkv, const AttentionDims&, const Tensor& out, const char* op) {
  cpu_expect_f32(qkv, op, "qkv");
  cpu_expect_f32(out, op, "out");
}

// Gemma 2's soft-capping of the scaled scores, as transformers: (s / cap) → tanh → × cap, in f32.
void softcap_scores(float* s, int64_t count, float cap) {
  if (cap == 0) return;
  for (int64_t j = 0; j < count; ++j) s[j] = std::tanh(s[j] / cap) * cap;
}

// scores[0, count) ← exp(s − max), returning 1 / Σ. With a sink (gpt-oss) the softmax runs
// over [scores | sink] — its max and sum count the sink — and only the keys' shares are kept, as
// transformers concatenates the sink to the scaled scores; `scores` has room for it.
float softmax(const cpu::AttentionKernels& k, std::vector<float>& scores, int64_t count, const float* sink) {
  if (!sink) return k.softmax(scores.data(), count);
  scores.resize(static_cast<size_t>(count + 1));
  scores[static_cast<size_t>(count)] = *sink;
  return k.softmax(scores.data(), count + 1);
}

}  // namespace

// A cache in f32, or narrower (--kv-cache-dtype): bf16, f16, FP8 E4M3 (saturating at ±448).
static void expect_cache(const Tensor& cache, const char* op, const char* name) {
  const DType t = cache.dtype();
  cpu_expect(t == DType::f32 || t == DType::bf16 || t == DType::f16 || t == DType::f8_e4m3, op,
             str(name, " must be f32, bf16, f16 or f8_e4m3, got ", cache.describe()));
}

void CpuBackend::kv_write_op(const Tensor& qkv, const AttentionDims& d, const Tensor& slots,
                          Tensor& cache_k, Tensor& cache_v) {
  cpu_expect_f32(qkv, "kv_write", "qkv");
  expect_cache(cache_k, "kv_write", "cache_k");
  cpu_expect(cache_v.dtype() == cache_k.dtype(), "kv_write", "cache_k and cache_v of one dtype");
  const DType ct = cache_k.dtype();
  const size_t es = dtype_size(ct);
  const int64_t n = qkv.dim(0), w = d.qkv_width(), dh = d.head_dim;
  const int64_t rows = cache_k.dim(0);
  const int32_t* slot = slots.ptr<int32_t>();
  for (int64_t t = 0; t < n; ++t) {
    if (slot[t] < 0) continue;
    cpu_expect(slot[t] < rows * d.max_seq, "kv_write", str("slot ", slot[t], " outside the cache"));
    const CacheAddress a = slot_address(slot[t], d);
    for (int64_t g = 0; g < d.kv_heads; ++g) {
      const float* k = qkv.ptr<float>() + t * w + (d.q_heads + g) * dh;
      const float* v = k + d.kv_heads * dh;
      const int64_t off = ((a.row * d.kv_heads + g) * d.max_seq + a.pos) * dh;
      // (Rounded to the cache's dtype: the one rounding attention_packed applies too.)
      linnet::convert(k, DType::f32, static_cast<char*>(cache_k.data()) + off * es, ct, static_cast<size_t>(dh));
      linnet::convert(v, DType::f32, static_cast<char*>(cache_v.data()) + off * es, ct, static_cast<size_t>(dh));
    }
  }
}

void CpuBackend::attention_packed_op(const Tensor& qkv, const AttentionDims& d, const Tensor& run_start,
                                  Tensor& out) {
  check_dims(qkv, d, out, "attention_packed");
  const int64_t n = qkv.dim(0), w = d.qkv_width(), dh = d.head_dim, group = d.q_heads / d.kv_heads;
  const int32_t* start = run_start.ptr<int32_t>();
  const float scale = d.score_scale();
  const float* base = qkv.ptr<float>();
  // A cache narrower than f32: the keys and values read here are rounded as kv_write stores them
  // (a copy of qkv with its K and V columns rounded), so a token's result is the same whether its
  // keys come from the call or from the cache.
  std::vector<float> rounded;
  if (d.round_kv && *d.round_kv != DType::f32) {
    rounded.assign(base, base + n * w);
    const DType rt = *d.round_kv;
#pragma omp parallel for schedule(static) if (n > 16)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = d.q_heads * dh; c < w; ++c) rounded[t * w + c] = round_to(rt, rounded[t * w + c]);
    base = rounded.data();
  }
  const cpu::AttentionKernels& k = cpu::attention_kernels();
  const float* sinks = d.sinks ? d.sinks->ptr<float>() : nullptr;
#pragma omp parallel
  {
    std::vector<float> scores;
    std::vector<const float*> values;
#pragma omp for schedule(dynamic, 4)
    for (int64_t task = 0; task < n * d.q_heads; ++task) {
      const int64_t t = task / d.q_heads, h = task % d.q_heads, g = h / group;
      if (start[t] < 0) continue;
      // A sliding window keeps the run's last `window` tokens up to t (by index in the run).
      const int64_t from = d.window > 0 ? std::max<int64_t>(start[t], t - d.window + 1) : start[t];
      const int64_t count = t - from + 1;
      scores.resize(static_cast<size_t>(count));
      values.resize(static_cast<size_t>(count));
      const float* q = base + t * w + h * dh;
      const float* first = base + from * w;
      k.scores(q, first + (d.q_heads + g) * dh, w, count, dh, scale, scores.data());
      softcap_scores(scores.data(), count, d.softcap);
      for (int64_t j = 0; j < count; ++j) values[j] = first + j * w + (d.q_heads + d.kv_heads + g) * dh;
      const float inv = softmax(k, scores, count, sinks ? &sinks[h] : nullptr);
      k.combine(scores.data(), values.data(), count, dh, inv, out.ptr<float>() + t * d.q_heads * dh + h * dh);
    }
  }
}

void CpuBackend::attention_cache_op(const Tensor& qkv, const AttentionDims& d, const Tensor& rows,
                                 const Tensor& positions, const Tensor& table, const Tensor& cache_k,
                                 const Tensor& cache_v, Tensor& out) {
  check_dims(qkv, d, out, "attention_cache");
  expect_cache(cache_k, "attention_cache", "cache_k");
  cpu_expect(cache_v.dtype() == cache_k.dtype(), "attention_cache", "cache_k and cache_v of one dtype");
  const DType ct = cache_k.dtype();
  const size_t es = dtype_size(ct);
  const int64_t n = qkv.dim(0), w = d.qkv_width(), dh = d.head_dim, group = d.q_heads / d.kv_heads;
  const int64_t pages = table.dim(1), cache_rows = cache_k.dim(0);
  const int32_t* row = rows.ptr<int32_t>();
  const int32_t* pos = positions.ptr<int32_t>();
  const int32_t* tab = table.ptr<int32_t>();
  const float scale = d.score_scale();
  // The first position token t attends: 0, or the start of its window.
  auto first_pos = [&](int64_t t) -> int64_t { return d.window > 0 ? std::max<int64_t>(0, pos[t] - d.window + 1) : 0; };
  const cpu::AttentionKernels& kern = cpu::attention_kernels();
  const float* sinks = d.sinks ? d.sinks->ptr<float>() : nullptr;
  for (int64_t t = 0; t < n; ++t) {
    if (row[t] < 0) continue;
    cpu_expect(row[t] < table.dim(0) && pos[t] >= 0 && pos[t] / d.page_size < pages,
               "attention_cache", str("token ", t, " (row ", row[t], ", position ", pos[t],
                                      ") is outside the table ", table.describe()));
    // The span a device backend sizes its splits by must cover every token (checked here,
    // where every cache entry of the tests runs).
    cpu_expect(d.span == 0 || pos[t] < d.span, "attention_cache",
               str("token ", t, " at position ", pos[t], " is past the call's span ", d.span));
    for (int64_t p = first_pos(t) / d.page_size; p <= pos[t] / d.page_size; ++p) {
      const int32_t page = tab[row[t] * pages + p];
      cpu_expect(page >= 0 && page < cache_rows * d.pages_per_row(), "attention_cache",
                 str("table[", row[t], ", ", p, "] = ", page, " is not a page"));
    }
  }
#pragma omp parallel
  {
    std::vector<float> scores;
    std::vector<const float*> values;
    std::vector<float> wide_k, wide_v;  // a narrower cache's keys and values, widened (exactly) to f32
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n * d.q_heads; ++task) {
      const int64_t t = task / d.q_heads, h = task % d.q_heads, g = h / group;
      if (row[t] < 0) continue;
      const int64_t lo = first_pos(t), count = pos[t] + 1 - lo;
      scores.resize(static_cast<size_t>(count));
      values.resize(static_cast<size_t>(count));
      if (ct != DType::f32) wide_k.resize(static_cast<size_t>(count * dh)), wide_v.resize(static_cast<size_t>(count * dh));
      const float* q = qkv.ptr<float>() + t * w + h * dh;
      // Page by page: a page's positions are contiguous in its cache row.
      for (int64_t j0 = lo; j0 <= pos[t];) {
        const int64_t page = tab[row[t] * pages + j0 / d.page_size];
        const CacheAddress a = slot_address(page * d.page_size, d);
        const int64_t in_page = j0 % d.page_size;
        const int64_t base = ((a.row * d.kv_heads + g) * d.max_seq + a.pos + in_page) * dh;
        const int64_t end = std::min(d.page_size - in_page, pos[t] + 1 - j0);
        const float* k = ct == DType::f32 ? cache_k.ptr<float>() + base : wide_k.data() + (j0 - lo) * dh;
        const float* v = ct == DType::f32 ? cache_v.ptr<float>() + base : wide_v.data() + (j0 - lo) * dh;
        if (ct != DType::f32) {
          linnet::convert(static_cast<const char*>(cache_k.data()) + base * es, ct, wide_k.data() + (j0 - lo) * dh,
                          DType::f32, static_cast<size_t>(end * dh));
          linnet::convert(static_cast<const char*>(cache_v.data()) + base * es, ct, wide_v.data() + (j0 - lo) * dh,
                          DType::f32, static_cast<size_t>(end * dh));
        }
        kern.scores(q, k, dh, end, dh, scale, scores.data() + (j0 - lo));
        for (int64_t i = 0; i < end; ++i) values[j0 - lo + i] = v + i * dh;
        j0 += end;
      }
      softcap_scores(scores.data(), count, d.softcap);
      const float inv = softmax(kern, scores, count, sinks ? &sinks[h] : nullptr);
      kern.combine(scores.data(), values.data(), count, dh, inv, out.ptr<float>() + t * d.q_heads * dh + h * dh);
    }
  }
}

}  // namespace linnet
