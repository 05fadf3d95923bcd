// The CPU backend: the reference every other backend is tested against. Computes in f32
// whatever the checkpoint's dtype (compute_dtype is f32); matrix weights stay as T stores
// them (bf16, f16: half the bytes), packed once at load and widened as they are read by one
// batch-invariant product kernel (core/cpu/packed_matmul.h); OpenMP across cores.
#pragma once
#include "core/backend.h"
#include "core/cpu/host_pool.h"

namespace linnet {

class CpuBackend : public Backend {  // not final: tests count its transfers
 public:
  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::cpu; }
  DType compute_dtype(DType weights) const override { return backend_compute_dtype("cpu", weights); }
  DType weight_dtype(DType t) const override { return backend_weight_dtype("cpu", t); }
  // Dense only: its one product kernel widens bf16/f16/f32 (core/cpu/packed_matmul.h).
  bool supports(WeightFormat f) const override { return f == WeightFormat::dense || f == WeightFormat::fp8 || f == WeightFormat::int4 ||
                                                         f == WeightFormat::int8 || f == WeightFormat::mxfp4;
  }
  // The cache in f32, or narrower: bf16, f16, FP8 E4M3 (widened exactly when read).
  bool supports_cache(DType cache, DType compute) const override {
    return compute == DType::f32 &&
           (cache == DType::f32 || cache == DType::bf16 || cache == DType::f16 || cache == DType::f8_e4m3);
  }

  Tensor empty(const Shape& shape, DType dtype) override { return pool_->empty(shape, dtype); }
  Tensor upload(const Tensor& host) override { return host; }
  Tensor to_host(const Tensor& t) override;
  // Packed in panels of 32 rows (core/cpu/packed_matmul.h), in the dtype it came in.
  Tensor upload_matrix(const Tensor& host) override;
  // Each part packed straight into its panels where the parts before it are whole panels.
  Tensor upload_matrix(const std::vector<Tensor>& parts) override;
  Tensor upload_quantized_matrix(const std::vector<QuantizedPart>& parts, const WeightLayout& layout) override;
  std::string packed_format() const override { return "cpu-panels32-v1"; }
  void copy_from_host(const Tensor& host, Tensor& dst) override;
  void fill_zero(Tensor& t) override;
  Tensor zeros(const Shape& shape, DType dtype) override { return Tensor::zeros(shape, dtype); }
  void synchronize() override {}
  int64_t memory_available() const override;
  // grouped_matmul_weight_bytes: the bytes of w's groups that had rows (what a mixture of
  // experts' step read of its experts), for bench's decode floor.
  std::vector<std::pair<std::string, int64_t>> counters() const override {
    return {{"grouped_matmul_weight_bytes", grouped_weight_bytes_}};
  }

  // The ops of core/backend_op_list.h: each checks its arguments (core/op_checks.h, then
  // that it computes in f32) and runs its *_op.
#define LINNET_OP(name, label, params, args) void name params override;
#include "core/backend_op_list.h"
#undef LINNET_OP

 private:
#define LINNET_OP(name, label, params, args) void name##_op params;
#include "core/backend_op_list.h"
#undef LINNET_OP

  std::shared_ptr<HostPool> pool_ = std::make_shared<HostPool>();
  int64_t grouped_weight_bytes_ = 0;
};

// Shared by the CPU ops: argument checks that name the op. The message is built only when
// the check fails (ops run thousands of times a second).
[[noreturn]] void cpu_fail(const char* op, const std::string& what);
#define cpu_expect(ok, op, what)        \
  do {                                  \
    if (!(ok)) ::linnet::cpu_fail(op, what); \
  } while (0)
void cpu_expect_f32(const Tensor& t, const char* op, const char* arg);
// The first row of a view into a packed matrix.
int64_t packed_row0(const Tensor& w);

}  // namespace linnet
