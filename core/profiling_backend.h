// ProfilingBackend: a Backend that forwards everything to another and, while armed, times
// each op with the inner backend's DeviceTimer (CUDA events on the GPU: device time, no extra
// synchronisation; wall time on the CPU, whose ops are synchronous). `linnet bench --profile`
// uses it to say where a prefill or a decode step spends its time. Disarmed it only forwards.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"

namespace linnet {

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}

  struct OpTime {
    std::string op;
    int64_t calls = 0;
    double seconds = 0;
  };
  void arm(bool on) { armed_ = on; }
  // What the armed calls took, the longest first (waits for the last of them); reset()
  // forgets them.
  std::vector<OpTime> report();
  void reset();

  std::string name() const override { return inner_.name(); }
  Device device() const override { return inner_.device(); }
  DType compute_dtype(DType weights) const override { return inner_.compute_dtype(weights); }
  DType weight_dtype(DType t) const override { return inner_.weight_dtype(t); }
  Tensor empty(const Shape& shape, DType dtype) override { return inner_.empty(shape, dtype); }
  Tensor upload(const Tensor& host) override { return inner_.upload(host); }
  Tensor to_host(const Tensor& t) override { return inner_.to_host(t); }
  Tensor upload_matrix(const Tensor& host) override { return inner_.upload_matrix(host); }
  Tensor upload_matrix(const std::vector<Tensor>& parts) override { return inner_.upload_matrix(parts); }
  std::string packed_format() const override { return inner_.packed_format(); }
  std::vector<Tensor> upload_many(const std::vector<Tensor>& hosts) override { return inner_.upload_many(hosts); }
  std::vector<Tensor> to_host_many(const std::vector<Tensor>& ts) override { return inner_.to_host_many(ts); }
  void copy_from_host(const Tensor& host, Tensor& dst) override { inner_.copy_from_host(host, dst); }
  void fill_zero(Tensor& t) override { inner_.fill_zero(t); }
  Tensor zeros(const Shape& shape, DType dtype) override { return inner_.zeros(shape, dtype); }
  void synchronize() override { inner_.synchronize(); }
  int64_t memory_available() const override { return inner_.memory_available(); }
  void release_cached_memory() override { inner_.release_cached_memory(); }
  void* stream_handle() const override { return inner_.stream_handle(); }
  int device_index() const override { return inner_.device_index(); }
  std::string device_id() const override { return inner_.device_id(); }
  std::unique_ptr<DeviceTimer> make_timer() override { return inner_.make_timer(); }
  double library_matmul_rate(DType dt, std::string* source) override { return inner_.library_matmul_rate(dt, source); }
  bool random_normal(Tensor& out, uint64_t key, int64_t base, int64_t stride, float mean, float scale) override {
    return inner_.random_normal(out, key, base, stride, mean, scale);
  }
  void flush() override { inner_.flush(); }
  std::vector<std::pair<std::string, int64_t>> counters() const override { return inner_.counters(); }

  void convert(const Tensor& src, Tensor& dst) override;
  void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) override;
  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& w, float eps, Tensor& out) override;
  void add(Tensor& x, const Tensor& y) override;
  void rope_heads(Tensor& x, int64_t head_begin, int64_t heads, int64_t head_dim, const Tensor& positions,
                  const Tensor& inv_freq, float scale) override;
  void swiglu(const Tensor& gate_up, Tensor& out) override;
  void geglu(const Tensor& gate_up, Tensor& out) override;
  void pointwise(Tensor& x, Pointwise op, float value) override;
  void sum_squares(const Tensor& x, int64_t col_begin, int64_t cols, Tensor& out) override;
  void rms_norm_cols(Tensor& x, int64_t col_begin, int64_t groups, int64_t width, const Tensor& w, float eps,
                     const Tensor* sum_sq, int64_t count) override;
  void kv_write(const Tensor& qkv, const AttentionDims& dims, const Tensor& slots, Tensor& cache_k,
                Tensor& cache_v) override;
  void attention_packed(const Tensor& qkv, const AttentionDims& dims, const Tensor& run_start, Tensor& out) override;
  void attention_cache(const Tensor& qkv, const AttentionDims& dims, const Tensor& rows, const Tensor& positions,
                       const Tensor& table, const Tensor& cache_k, const Tensor& cache_v, Tensor& out) override;
  void gather_rows(const Tensor& src, const Tensor& index, Tensor& out) override;
  void copy_columns(const Tensor& src, Tensor& dst, int64_t col_begin, int64_t cols) override;
  void router_softmax(const Tensor& logits, Tensor& probs) override;
  void top_k(const Tensor& probs, int64_t k, bool normalize, Tensor& weights, Tensor& experts) override;
  void grouped_matmul(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets, Tensor& out) override;
  void moe_combine(const Tensor& y, const Tensor& rows, const Tensor& experts, const Tensor& weights,
                   Tensor& out) override;
  void logit_stats(const Tensor& logits, int64_t valid, int64_t vocab_offset, const Tensor& targets, Tensor& max,
                   Tensor& sumexp, Tensor& target_logit) override;
  void argmax(const Tensor& logits, int64_t valid, int64_t vocab_offset, Tensor& value, Tensor& index) override;
  void gumbel_max(const Tensor& logits, int64_t valid, int64_t vocab_offset, uint64_t key0, uint64_t key1,
                  int32_t step, float temperature, Tensor& value, Tensor& index) override;

 private:
  struct Entry {
    std::unique_ptr<DeviceTimer> timer;
    int64_t calls = 0;
  };
  template <class F>
  void timed(const char* op, F&& f);

  Backend& inner_;
  bool armed_ = false;
  std::map<std::string, Entry> ops_;
};

}  // namespace linnet
