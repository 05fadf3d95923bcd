// The CPU backend's mixture-of-experts ops (core/backend.h): the router's softmax, torch's
// top-k, each expert's product over its rows, and the weighted sum in transformers' order.
#include <cmath>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/top_k.h"

namespace linnet {

void CpuBackend::router_softmax_op(const Tensor& logits, Tensor& probs) {
  cpu_expect_f32(logits, "router_softmax", "logits");  // the CPU computes in f32
  cpu_expect_f32(probs, "router_softmax", "probs");
  const int64_t n = logits.dim(0), e = logits.dim(1);
  for (int64_t r = 0; r < n; ++r) {
    const float* x = logits.ptr<float>() + r * e;
    float* p = probs.ptr<float>() + r * e;
    float mx = -INFINITY;
    for (int64_t i = 0; i < e; ++i) mx = std::fmax(mx, x[i]);
    double sum = 0;
    for (int64_t i = 0; i < e; ++i) {
      p[i] = std::exp(x[i] - mx);
      sum += p[i];
    }
    // torch multiplies by the sum's reciprocal; equal logits give equal probabilities either way.
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < e; ++i) p[i] *= inv;
  }
}

void CpuBackend::top_k_op(const Tensor& probs, int64_t k, bool normalize, Tensor& weights, Tensor& experts) {
  cpu_expect_f32(probs, "top_k", "probs");
  cpu_expect_f32(weights, "top_k", "weights");
  const int64_t n = probs.dim(0), e = probs.dim(1);
  std::vector<topk::Entry> row(static_cast<size_t>(e));
  for (int64_t r = 0; r < n; ++r) {
    const float* p = probs.ptr<float>() + r * e;
    for (int64_t i = 0; i < e; ++i) row[static_cast<size_t>(i)] = {p[i], static_cast<int32_t>(i)};
    topk::torch_top_k(row.data(), e, k);
    float* w = weights.ptr<float>() + r * k;
    int32_t* ix = experts.ptr<int32_t>() + r * k;
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      w[j] = row[static_cast<size_t>(j)].value;
      ix[j] = row[static_cast<size_t>(j)].index;
      sum += w[j];
    }
    if (normalize)
      for (int64_t j = 0; j < k; ++j) w[j] /= sum;
  }
}

void CpuBackend::choose_experts_op(const Tensor& logits, const Tensor* bias, const ExpertChoice& rule, int64_t k,
                                  Tensor& weights, Tensor& experts) {
  cpu_expect_f32(weights, "choose_experts", "weights");
  const int64_t n = logits.dim(0), e = logits.dim(1);
  std::vector<topk::Entry> scratch(static_cast<size_t>(e + rule.groups));
  std::vector<float> scores(static_cast<size_t>(e));
  for (int64_t r = 0; r < n; ++r)
    topk::choose_experts(logits.ptr<float>() + r * e, bias ? bias->ptr<float>() : nullptr, rule, e, k, scratch.data(),
                         scores.data(), weights.ptr<float>() + r * k, experts.ptr<int32_t>() + r * k);
}

void CpuBackend::grouped_matmul_op(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets, Tensor& out) {
  const int64_t groups = static_cast<int64_t>(offsets.size()) - 1;
  const int64_t o = out.dim(1);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t a = offsets[static_cast<size_t>(g)], b = offsets[static_cast<size_t>(g + 1)];
    if (a == b) continue;
    // The packed product on this group's rows: the same kernel and bits as for any row count.
    const Tensor expert = w.rows(g * o, (g + 1) * o);
    grouped_weight_bytes_ += static_cast<int64_t>(expert.span_bytes());  // (4-bit formats: half a byte a weight)
    Tensor rows = out.rows(a, b);
    matmul(x.rows(a, b), expert, nullptr, rows);
  }
}

void CpuBackend::moe_combine_op(const Tensor& y, const Tensor& rows, const Tensor& experts, const Tensor& weights,
                             Tensor& out) {
  cpu_expect_f32(y, "moe_combine", "y");
  cpu_expect_f32(weights, "moe_combine", "weights");
  cpu_expect_f32(out, "moe_combine", "out");
  const int64_t n = out.dim(0), h = out.dim(1);
  const int64_t k = n > 0 ? rows.numel() / n : 0;
  const int32_t* rw = rows.ptr<int32_t>();
  const int32_t* ex = experts.ptr<int32_t>();
  const float* wt = weights.ptr<float>();
  cpu_expect(k <= 64, "moe_combine", str(k, " choices per token (at most 64)"));
  for (int64_t i = 0; i < n * k; ++i)
    cpu_expect(rw[i] < y.dim(0), "moe_combine", str("row ", rw[i], " of ", y.describe()));
#pragma omp parallel for if (n * h > 65536)
  for (int64_t t = 0; t < n; ++t) {
    // This token's choices in increasing expert order (k is small: an insertion sort).
    int64_t order[64];
    int64_t m = 0;
    for (int64_t j = 0; j < k; ++j) {
      if (rw[t * k + j] < 0) continue;
      int64_t at = m++;
      while (at > 0 && ex[t * k + order[at - 1]] > ex[t * k + j]) order[at] = order[at - 1], --at;
      order[at] = j;
    }
    float* o = out.ptr<float>() + t * h;
    for (int64_t c = 0; c < h; ++c) o[c] = 0.0f;
    for (int64_t i = 0; i < m; ++i) {
      const int64_t j = order[i], r = rw[t * k + j];
      const float w = wt[t * k + j];
      const float* v = y.ptr<float>() + r * h;
      for (int64_t c = 0; c < h; ++c) {
        const float product = v[c] * w;  // rounded, then added: index_add_ of (y · w)
        o[c] += product;
      }
    }
  }
}

}  // namespace linnet
