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
  bool supports(WeightFormat f) const override { return inner_.supports(f); }
  Tensor empty(const Shape& shape, DType dtype) override { return inner_.empty(shape, dtype); }
  Tensor upload(const Tensor& host) override { return inner_.upload(host); }
  Tensor to_host(const Tensor& t) override { return inner_.to_host(t); }
  Tensor upload_matrix(const Tensor& host) override { return inner_.upload_matrix(host); }
  Tensor upload_matrix(const std::vector<Tensor>& parts) override { return inner_.upload_matrix(parts); }
  Tensor upload_quantized_matrix(const std::vector<QuantizedPart>& parts, const WeightLayout& layout) override {
    return inner_.upload_quantized_matrix(parts, layout);
  }
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

  // Each op of core/backend_op_list.h, timed under its label.
#define LINNET_OP(name, label, params, args) void name params override;
#include "core/backend_op_list.h"
#undef LINNET_OP

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
