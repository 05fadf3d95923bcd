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

}  // namespace

void CpuBackend::kv_write_op(const Tensor& qkv, const AttentionDims& d, const Tensor& slots,
                          Tensor& cache_k, Tensor& cache_v) {
  cpu_expect_f32(qkv, "kv_write", "qkv");
  cpu_expect_f32(cache_k, "kv_write", "cache_k");
  cpu_expect_f32(cache_v, "kv_write", "cache_v");
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
      std::copy(k, k + dh, cache_k.ptr<float>() + off);
      std::copy(v, v + dh, cache_v.ptr<float>() + off);
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
  const cpu::AttentionKernels& k = cpu::attention_kernels();
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
      const float inv = k.softmax(scores.data(), count);
      k.combine(scores.data(), values.data(), count, dh, inv, out.ptr<float>() + t * d.q_heads * dh + h * dh);
    }
  }
}

void CpuBackend::attention_cache_op(const Tensor& qkv, const AttentionDims& d, const Tensor& rows,
                                 const Tensor& positions, const Tensor& table, const Tensor& cache_k,
                                 const Tensor& cache_v, Tensor& out) {
  check_dims(qkv, d, out, "attention_cache");
  cpu_expect_f32(cache_k, "attention_cache", "cache_k");
  cpu_expect_f32(cache_v, "attention_cache", "cache_v");
  const int64_t n = qkv.dim(0), w = d.qkv_width(), dh = d.head_dim, group = d.q_heads / d.kv_heads;
  const int64_t pages = table.dim(1), cache_rows = cache_k.dim(0);
  const int32_t* row = rows.ptr<int32_t>();
  const int32_t* pos = positions.ptr<int32_t>();
  const int32_t* tab = table.ptr<int32_t>();
  const float scale = d.score_scale();
  // The first position token t attends: 0, or the start of its window.
  auto first_pos = [&](int64_t t) -> int64_t { return d.window > 0 ? std::max<int64_t>(0, pos[t] - d.window + 1) : 0; };
  const cpu::AttentionKernels& kern = cpu::attention_kernels();
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
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n * d.q_heads; ++task) {
      const int64_t t = task / d.q_heads, h = task % d.q_heads, g = h / group;
      if (row[t] < 0) continue;
      const int64_t lo = first_pos(t), count = pos[t] + 1 - lo;
      scores.resize(static_cast<size_t>(count));
      values.resize(static_cast<size_t>(count));
      const float* q = qkv.ptr<float>() + t * w + h * dh;
      // Page by page: a page's positions are contiguous in its cache row.
      for (int64_t j0 = lo; j0 <= pos[t];) {
        const int64_t page = tab[row[t] * pages + j0 / d.page_size];
        const CacheAddress a = slot_address(page * d.page_size, d);
        const int64_t in_page = j0 % d.page_size;
        const int64_t base = ((a.row * d.kv_heads + g) * d.max_seq + a.pos + in_page) * dh;
        const float* k = cache_k.ptr<float>() + base;
        const float* v = cache_v.ptr<float>() + base;
        const int64_t end = std::min(d.page_size - in_page, pos[t] + 1 - j0);
        kern.scores(q, k, dh, end, dh, scale, scores.data() + (j0 - lo));
        for (int64_t i = 0; i < end; ++i) values[j0 - lo + i] = v + i * dh;
        j0 += end;
      }
      softcap_scores(scores.data(), count, d.softcap);
      const float inv = kern.softmax(scores.data(), count);
      kern.combine(scores.data(), values.data(), count, dh, inv, out.ptr<float>() + t * d.q_heads * dh + h * dh);
    }
  }
}

}  // namespace linnet
