#include "core/profiling_backend.h"

#include <algorithm>

namespace linnet {

template <class F>
void ProfilingBackend::timed(const char* op, F&& f) {
  if (!armed_) return f();
  Entry& e = ops_[op];
  if (!e.timer) e.timer = inner_.make_timer();
  ++e.calls;
  e.timer->start();
  f();
  e.timer->stop();
}

std::vector<ProfilingBackend::OpTime> ProfilingBackend::report() {
  std::vector<OpTime> out;
  for (auto& [op, e] : ops_) out.push_back({op, e.calls, e.timer->seconds()});
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return out;
}

void ProfilingBackend::reset() { ops_.clear(); }

void ProfilingBackend::convert(const Tensor& src, Tensor& dst) {
  timed("convert", [&] { inner_.convert(src, dst); });
}
void ProfilingBackend::embedding(const Tensor& weight, const Tensor& ids, Tensor& out) {
  timed("embedding", [&] { inner_.embedding(weight, ids, out); });
}
void ProfilingBackend::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  timed("matmul", [&] { inner_.matmul(x, w, bias, out); });
}
void ProfilingBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  timed("rms_norm", [&] { inner_.rms_norm(x, w, eps, out); });
}
void ProfilingBackend::add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& w, float eps, Tensor& out) {
  timed("add_rms_norm", [&] { inner_.add_rms_norm(residual, delta, w, eps, out); });
}
void ProfilingBackend::add(Tensor& x, const Tensor& y) {
  timed("add", [&] { inner_.add(x, y); });
}
void ProfilingBackend::rope_heads(Tensor& x, int64_t head_begin, int64_t heads, int64_t head_dim,
                                  const Tensor& positions, const Tensor& inv_freq, float scale) {
  timed("rope", [&] { inner_.rope_heads(x, head_begin, heads, head_dim, positions, inv_freq, scale); });
}
void ProfilingBackend::geglu(const Tensor& gate_up, Tensor& out) {
  timed("geglu", [&] { inner_.geglu(gate_up, out); });
}
void ProfilingBackend::pointwise(Tensor& x, Pointwise op, float value) {
  timed("pointwise", [&] { inner_.pointwise(x, op, value); });
}
void ProfilingBackend::sum_squares(const Tensor& x, int64_t col_begin, int64_t cols, Tensor& out) {
  timed("sum_squares", [&] { inner_.sum_squares(x, col_begin, cols, out); });
}
void ProfilingBackend::rms_norm_cols(Tensor& x, int64_t col_begin, int64_t groups, int64_t width, const Tensor& w,
                                     float eps, const Tensor* sum_sq, int64_t count) {
  timed("rms_norm_cols", [&] { inner_.rms_norm_cols(x, col_begin, groups, width, w, eps, sum_sq, count); });
}
void ProfilingBackend::swiglu(const Tensor& gate_up, Tensor& out) {
  timed("swiglu", [&] { inner_.swiglu(gate_up, out); });
}
void ProfilingBackend::kv_write(const Tensor& qkv, const AttentionDims& dims, const Tensor& slots, Tensor& cache_k,
                                Tensor& cache_v) {
  timed("kv_write", [&] { inner_.kv_write(qkv, dims, slots, cache_k, cache_v); });
}
void ProfilingBackend::attention_packed(const Tensor& qkv, const AttentionDims& dims, const Tensor& run_start,
                                        Tensor& out) {
  timed("attention_packed", [&] { inner_.attention_packed(qkv, dims, run_start, out); });
}
void ProfilingBackend::attention_cache(const Tensor& qkv, const AttentionDims& dims, const Tensor& rows,
                                       const Tensor& positions, const Tensor& table, const Tensor& cache_k,
                                       const Tensor& cache_v, Tensor& out) {
  timed("attention_cache", [&] { inner_.attention_cache(qkv, dims, rows, positions, table, cache_k, cache_v, out); });
}
void ProfilingBackend::gather_rows(const Tensor& src, const Tensor& index, Tensor& out) {
  timed("gather_rows", [&] { inner_.gather_rows(src, index, out); });
}
void ProfilingBackend::copy_columns(const Tensor& src, Tensor& dst, int64_t col_begin, int64_t cols) {
  timed("copy_columns", [&] { inner_.copy_columns(src, dst, col_begin, cols); });
}
void ProfilingBackend::router_softmax(const Tensor& logits, Tensor& probs) {
  timed("router_softmax", [&] { inner_.router_softmax(logits, probs); });
}
void ProfilingBackend::top_k(const Tensor& probs, int64_t k, bool normalize, Tensor& weights, Tensor& experts) {
  timed("top_k", [&] { inner_.top_k(probs, k, normalize, weights, experts); });
}
void ProfilingBackend::grouped_matmul(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets,
                                      Tensor& out) {
  timed("grouped_matmul", [&] { inner_.grouped_matmul(x, w, offsets, out); });
}
void ProfilingBackend::moe_combine(const Tensor& y, const Tensor& rows, const Tensor& experts, const Tensor& weights,
                                   Tensor& out) {
  timed("moe_combine", [&] { inner_.moe_combine(y, rows, experts, weights, out); });
}
void ProfilingBackend::logit_stats(const Tensor& logits, int64_t valid, int64_t vocab_offset, const Tensor& targets,
                                   Tensor& max, Tensor& sumexp, Tensor& target_logit) {
  timed("logit_stats", [&] { inner_.logit_stats(logits, valid, vocab_offset, targets, max, sumexp, target_logit); });
}
void ProfilingBackend::argmax(const Tensor& logits, int64_t valid, int64_t vocab_offset, Tensor& value,
                              Tensor& index) {
  timed("argmax", [&] { inner_.argmax(logits, valid, vocab_offset, value, index); });
}
void ProfilingBackend::gumbel_max(const Tensor& logits, int64_t valid, int64_t vocab_offset, uint64_t key0,
                                  uint64_t key1, int32_t step, float temperature, Tensor& value, Tensor& index) {
  timed("gumbel_max",
        [&] { inner_.gumbel_max(logits, valid, vocab_offset, key0, key1, step, temperature, value, index); });
}

}  // namespace linnet
