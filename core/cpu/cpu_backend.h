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

  Tensor empty(const Shape& shape, DType dtype) override { return pool_->empty(shape, dtype); }
  Tensor upload(const Tensor& host) override { return host; }
  Tensor to_host(const Tensor& t) override;
  // Packed in panels of 32 rows (core/cpu/packed_matmul.h), in the dtype it came in.
  Tensor upload_matrix(const Tensor& host) override;
  // Each part packed straight into its panels where the parts before it are whole panels.
  Tensor upload_matrix(const std::vector<Tensor>& parts) override;
  std::string packed_format() const override { return "cpu-panels32-v1"; }
  void copy_from_host(const Tensor& host, Tensor& dst) override;
  void fill_zero(Tensor& t) override;
  Tensor zeros(const Shape& shape, DType dtype) override { return Tensor::zeros(shape, dtype); }
  void synchronize() override {}
  int64_t memory_available() const override;
  void convert(const Tensor& src, Tensor& dst) override;

  void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) override;
  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& w, float eps,
                    Tensor& out) override;
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
  void attention_packed(const Tensor& qkv, const AttentionDims& dims, const Tensor& run_start,
                        Tensor& out) override;
  void attention_cache(const Tensor& qkv, const AttentionDims& dims, const Tensor& rows,
                       const Tensor& positions, const Tensor& table, const Tensor& cache_k,
                       const Tensor& cache_v, Tensor& out) override;
  void gather_rows(const Tensor& src, const Tensor& index, Tensor& out) override;
  void copy_columns(const Tensor& src, Tensor& dst, int64_t col_begin, int64_t cols) override;

  void router_softmax(const Tensor& logits, Tensor& probs) override;
  void top_k(const Tensor& probs, int64_t k, bool normalize, Tensor& weights, Tensor& experts) override;
  void grouped_matmul(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets, Tensor& out) override;
  void moe_combine(const Tensor& y, const Tensor& rows, const Tensor& experts, const Tensor& weights,
                   Tensor& out) override;

  void logit_stats(const Tensor& logits, int64_t valid, int64_t vocab_offset, const Tensor& targets,
                   Tensor& max, Tensor& sumexp, Tensor& target_logit) override;
  void argmax(const Tensor& logits, int64_t valid, int64_t vocab_offset, Tensor& value,
              Tensor& index) override;
  void gumbel_max(const Tensor& logits, int64_t valid, int64_t vocab_offset, uint64_t key0,
                  uint64_t key1, int32_t step, float temperature, Tensor& value,
                  Tensor& index) override;
  // grouped_matmul_weight_bytes: the bytes of w's groups that had rows (what a mixture of
  // experts' step read of its experts), for bench's decode floor.
  std::vector<std::pair<std::string, int64_t>> counters() const override {
    return {{"grouped_matmul_weight_bytes", grouped_weight_bytes_}};
  }

 private:
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
