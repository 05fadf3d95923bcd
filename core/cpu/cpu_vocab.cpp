// Ops over one rank's vocab shard of logits: log-softmax pieces, argmax and Gumbel-max.
// Each returns per-row partial results that combine across shards (max, sum, or
// (value, index) max) without gathering the logits.
#include <cmath>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/philox.h"

namespace linnet {

namespace {
// One row of logits as f32 (bf16/f16 logits widened).
const float* row_f32(const Tensor& logits, int64_t r, std::vector<float>& buf) {
  const int64_t w = logits.dim(1);
  if (logits.dtype() == DType::f32) return logits.ptr<float>() + r * w;
  buf.resize(static_cast<size_t>(w));
  linnet::convert(static_cast<const char*>(logits.data()) + r * w * dtype_size(logits.dtype()),
                  logits.dtype(), buf.data(), DType::f32, buf.size());
  return buf.data();
}

}  // namespace

void CpuBackend::logit_stats_op(const Tensor& logits, int64_t valid, int64_t vocab_offset,
                             const Tensor& targets, Tensor& max, Tensor& sumexp, Tensor& target_logit) {
  const int64_t n = logits.dim(0);
  const int32_t* tgt = targets.ptr<int32_t>();
#pragma omp parallel
  {
    std::vector<float> buf;
#pragma omp for
    for (int64_t r = 0; r < n; ++r) {
      const float* x = row_f32(logits, r, buf);
      float mx = -INFINITY;
      for (int64_t k = 0; k < valid; ++k) mx = std::max(mx, x[k]);
      double s = 0;
      for (int64_t k = 0; k < valid; ++k) s += std::exp(static_cast<double>(x[k] - mx));
      max.ptr<float>()[r] = mx;
      sumexp.ptr<float>()[r] = static_cast<float>(s);
      const int64_t local = static_cast<int64_t>(tgt[r]) - vocab_offset;
      target_logit.ptr<float>()[r] = (tgt[r] >= 0 && local >= 0 && local < valid) ? x[local] : 0.0f;
    }
  }
}

void CpuBackend::argmax_op(const Tensor& logits, int64_t valid, int64_t vocab_offset, Tensor& value,
                        Tensor& index) {
  const int64_t n = logits.dim(0);
#pragma omp parallel if (n > 1)
  {
    std::vector<float> buf;
#pragma omp for
    for (int64_t r = 0; r < n; ++r) {
      const float* x = row_f32(logits, r, buf);
      int64_t best = 0;
      for (int64_t k = 1; k < valid; ++k)
        if (x[k] > x[best]) best = k;  // strict: the lowest index wins ties
      value.ptr<float>()[r] = valid > 0 ? x[best] : -INFINITY;
      index.ptr<int32_t>()[r] = static_cast<int32_t>(vocab_offset + best);
    }
  }
}

void CpuBackend::gumbel_max_op(const Tensor& logits, int64_t valid, int64_t vocab_offset, uint64_t key0,
                            uint64_t key1, int32_t step, float temperature, Tensor& value,
                            Tensor& index) {
  const int64_t n = logits.dim(0);
#pragma omp parallel
  {
    std::vector<float> buf;
#pragma omp for
    for (int64_t r = 0; r < n; ++r) {
      const float* x = row_f32(logits, r, buf);
      float best_v = -INFINITY;
      int64_t best = 0;
      for (int64_t k = 0; k < valid; ++k) {
        const uint32_t global = static_cast<uint32_t>(vocab_offset + k);
        const float s = x[k] / temperature +
                        philox::gumbel(key0, key1, global, static_cast<uint32_t>(r), static_cast<uint32_t>(step));
        if (s > best_v) {
          best_v = s;
          best = k;
        }
      }
      value.ptr<float>()[r] = best_v;
      index.ptr<int32_t>()[r] = static_cast<int32_t>(vocab_offset + best);
    }
  }
}

}  // namespace linnet
