// The CUDA backend: one device, one stream, a caching allocator.
// Code that needs the stream (a NCCL communicator, say) includes this from a .cu file.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/backend.h"

namespace linnet::cuda {

// Size-bucketed free lists of device blocks. A block released by a Tensor's Storage goes back
// to its bucket (no CUDA call); it is reused by the next allocation of that bucket, which is
// safe because all of a backend's work runs in order on its one stream. cudaMalloc happens
// only when a bucket is empty, so a steady-state decode step, which asks for the same sizes
// every time, allocates nothing. When cudaMalloc fails, cached blocks are freed and it is
// tried once more.
class MemoryPool {
 public:
  explicit MemoryPool(int device) : device_(device) {}
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // The bucket size a request of `bytes` is served from.
  static size_t bucket(size_t bytes);
  void* allocate(size_t bucket_bytes);
  void release(void* p, size_t bucket_bytes);
  void free_cached();  // returns every cached block to the driver

  size_t bytes_in_use() const;
  size_t bytes_cached() const;
  size_t mallocs() const;  // cudaMalloc calls so far

 private:
  int device_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t in_use_ = 0, cached_ = 0, mallocs_ = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override;
  Device device() const override { return Device::cuda; }
  DType compute_dtype(DType weights) const override;

  Tensor empty(const Shape& shape, DType dtype) override;
  Tensor upload(const Tensor& host) override;
  Tensor to_host(const Tensor& t) override;
  std::vector<Tensor> upload_many(const std::vector<Tensor>& hosts) override;
  std::vector<Tensor> to_host_many(const std::vector<Tensor>& ts) override;
  void copy_from_host(const Tensor& host, Tensor& dst) override;
  void fill_zero(Tensor& t) override;
  void synchronize() override;
  int64_t memory_available() const override;
  void release_cached_memory() override;
  void convert(const Tensor& src, Tensor& dst) override;
  std::unique_ptr<DeviceTimer> make_timer() override;
  double library_matmul_rate(DType dt, std::string* source) override;  // cuBLAS (cublas_rate.cu)

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
  void kv_write(const Tensor& qkv, const AttentionDims& dims, const Tensor& slots,
                Tensor& cache_k, Tensor& cache_v) override;
  void attention_packed(const Tensor& qkv, const AttentionDims& dims, const Tensor& run_start,
                        Tensor& out) override;
  void attention_cache(const Tensor& qkv, const AttentionDims& dims, const Tensor& rows,
                       const Tensor& positions, const Tensor& table, const Tensor& cache_k,
                       const Tensor& cache_v, Tensor& out) override;
  void gather_rows(const Tensor& src, const Tensor& index, Tensor& out) override;
  void copy_columns(const Tensor& src, Tensor& dst, int64_t col_begin, int64_t cols) override;
  void logit_stats(const Tensor& logits, int64_t valid, int64_t vocab_offset,
                   const Tensor& targets, Tensor& max, Tensor& sumexp,
                   Tensor& target_logit) override;
  void argmax(const Tensor& logits, int64_t valid, int64_t vocab_offset, Tensor& value,
              Tensor& index) override;
  void gumbel_max(const Tensor& logits, int64_t valid, int64_t vocab_offset, uint64_t key0,
                  uint64_t key1, int32_t step, float temperature, Tensor& value,
                  Tensor& index) override;

  cudaStream_t stream() const { return stream_; }
  void* stream_handle() const override { return stream_; }
  int device_index() const override { return device_; }
  std::string device_id() const override;
  const MemoryPool& pool() const { return *pool_; }

 private:
  void activate() const;  // makes this backend's device current on the calling thread
  // A pinned host buffer of at least `bytes` for staged copies; waits until the copy that
  // last read or wrote it is done.
  char* staging(size_t bytes);

  int device_;
  // Tensor cores for bf16 × bf16 and f16 × f16 products (matmul_tc.cu); LINNET_CUDA_MATMUL=simt
  // turns them off (matmul.cu for every product), chosen once per backend.
  bool tensor_cores_ = true;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<MemoryPool> pool_;
  char* staging_ = nullptr;  // pinned (cudaHostAlloc)
  size_t staging_bytes_ = 0;
  cudaEvent_t staging_done_ = nullptr;
};

}  // namespace linnet::cuda
