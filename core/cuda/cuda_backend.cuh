// The CUDA backend: one device, one stream, a caching allocator.
// Code that needs the stream (a NCCL communicator, say) includes this from a .cu file.
#pragma once
#include <cuda_runtime.h>

#include <cstring>

#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/backend.h"
#include "core/cuda/launch_records.cuh"
#include "core/cuda/matmul_fp8_lt.cuh"

namespace linnet::cuda {

// Which kernels and launch paths a backend takes, read from the environment once, when it is
// made (docs/gpu.md, "Switches"). LINNET_CUDA_LEGACY=1 sets every one to the earlier path;
// each variable then overrides its own. A value not listed is refused by name.
struct CudaOptions {
  enum class Matmul { tensor_cores, tc4, simt };
  Matmul matmul = Matmul::tensor_cores;  // LINNET_CUDA_MATMUL=auto|tc4|simt
  bool panel_raster = true;              // LINNET_CUDA_RASTER=panel|columns
  bool graphs = true;                    // LINNET_CUDA_GRAPHS=1|0
  bool attention_prefetch = true;        // LINNET_CUDA_ATTENTION=prefetch|v1
  bool split_rows = true;                // LINNET_CUDA_ROWS=split|block
  int cache_split = 256;                 // LINNET_CUDA_CACHE_SPLIT=256|128|64|32: attention_cache's piece
  // LINNET_CUDA_FP8=exact|cublaslt: FP8 layers with FP8 inputs on Hopper's FP8 tensor cores
  // through cuBLASLt (Fp8Lt), or dequantized in the products' loads (exact: the default).
  bool fp8_cublaslt = false;
  static CudaOptions from_environment();
  std::string describe() const;  // "matmul auto, raster panel, graphs on, …"
};

// A step's launches replayed as a CUDA graph. run() gets the launches recorded since the last
// flush; the first time a sequence is seen they are launched one by one, the second time the
// sequence is captured into a graph, and from then on the graph is replayed whenever the same
// sequence comes again (the same ops on the same pointers and shapes: a decode step at the
// same batch size, its buffers reused from the pool in the same order). Decode steps differ
// only in values held on the device (positions, slots, ids), so their launches repeat exactly.
class GraphCache {
 public:
  // A Llama-3-8B decode step under tensor parallelism is ~65 sequences (each collective ends
  // one): the cache holds several steps' worth.
  explicit GraphCache(size_t capacity = 512) : capacity_(capacity) {}
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  void run(const std::vector<Launch>& launches, cudaStream_t s);
  // The fewest launches worth a graph (below it they are launched directly).
  static constexpr size_t kMinLaunches = 4;

  int64_t replays = 0, captures = 0, direct = 0, launches_replayed = 0, launches_direct = 0, capture_failures = 0;
  size_t size() const { return graphs_.size(); }

 private:
  struct Entry {
    std::vector<Launch> launches;
    cudaGraphExec_t exec = nullptr;
    uint64_t hash = 0;
  };
  size_t capacity_;
  std::list<Entry> graphs_;  // most recently used first
  std::unordered_map<uint64_t, int> seen_;
  std::unordered_map<uint64_t, bool> uncapturable_;
  std::unordered_map<uint64_t, int> recaptures_;
};

// Size-bucketed free lists of device blocks. A block released by a Tensor's Storage goes back
// to its bucket (no CUDA call); it is reused (the lowest address first: the same requests from
// the same free blocks get the same blocks) by the next allocation of that bucket, which is
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
  // Called before cached blocks go back to the driver (the backend launches what it has
  // recorded first: a recorded launch may still name a cached block).
  void set_before_free(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(mu_);
    before_free_ = std::move(f);
  }
  void* allocate(size_t bucket_bytes);
  void release(void* p, size_t bucket_bytes);
  void free_cached();  // returns every cached block to the driver

  size_t bytes_in_use() const;
  size_t bytes_cached() const;
  size_t mallocs() const;  // cudaMalloc calls so far

 private:
  int device_;
  mutable std::mutex mu_;
  std::function<void()> before_free_;
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
  // Dense matrices (matmul_tc's and the SIMT product) and every quantized format: the SIMT
  // product dequantizes in its loads (core/cuda/quantized_weights.cuh).
  bool supports(WeightFormat) const override { return true; }
  // The cache in the compute dtype, or in f32, bf16, f16 or FP8 E4M3 beside it (kv_write rounds
  // to it, attention_cache widens exactly, attention_packed rounds K and V alike).
  bool supports_cache(DType cache, DType compute) const override {
    return is_float(compute) &&
           (cache == DType::f32 || cache == DType::bf16 || cache == DType::f16 || cache == DType::f8_e4m3);
  }

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
  bool random_normal(Tensor& out, uint64_t key, int64_t base, int64_t stride, float mean, float scale) override;
  void flush() override;
  std::vector<std::pair<std::string, int64_t>> counters() const override;
  // A matrix already on this device is taken as it is (the layout is row-major): no copy.
  Tensor upload_matrix(const Tensor& host) override;
  // The parts' rows copied straight into their place in one device matrix (no host stack).
  Tensor upload_matrix(const std::vector<Tensor>& parts) override;
  // A quantized matrix: its parts read as core/quantized_parts.h reads them for every backend,
  // then held row-major in one allocation (cuda::QuantWeights), in its stored bits.
  Tensor upload_quantized_matrix(const std::vector<QuantizedPart>& parts, const WeightLayout& layout) override;
  std::unique_ptr<DeviceTimer> make_timer() override;
  double library_matmul_rate(DType dt, std::string* source) override;  // cuBLAS (cublas_rate.cu)

  // The ops of core/backend_op_list.h: each checks that its tensors are defined and on this
  // device (written once, from the list), then runs name_op.
#define LINNET_OP(name, label, params, args) void name params override;
#include "core/backend_op_list.h"
#undef LINNET_OP

  cudaStream_t stream() const { return stream_; }
  void* stream_handle() const override { return stream_; }
  int device_index() const override { return device_; }
  std::string device_id() const override;
  const MemoryPool& pool() const { return *pool_; }
  const CudaOptions& options() const { return options_; }

 private:
  // Each op past the checks every op shares: its own checks and its launch.
#define LINNET_OP(name, label, params, args) void name##_op params;
#include "core/backend_op_list.h"
#undef LINNET_OP
  void activate() const;  // makes this backend's device current on the calling thread
  // Runs a launch now, or records it for the step's graph (options_.graphs).
  void submit(const Launch& l);
  void submit_argmax(const Tensor& logits, int64_t valid, int64_t vocab_offset, bool gumbel, uint64_t key0,
                     uint64_t key1, int32_t step, float temperature, Tensor& value, Tensor& index);
  // A pinned host buffer of at least `bytes` for staged copies; waits until the copy that
  // last read or wrote it is done.
  char* staging(size_t bytes);

  int device_;
  CudaOptions options_;
  cudaStream_t stream_ = nullptr;
  std::vector<Launch> pending_;  // recorded, not yet launched (graphs on)
  GraphCache graphs_;
  int64_t grouped_weight_bytes_ = 0;  // counters(): grouped_matmul's groups that had rows
  std::unique_ptr<Fp8Lt> fp8_lt_;     // options_.fp8_cublaslt: made with the backend
  std::shared_ptr<MemoryPool> pool_;
  char* staging_ = nullptr;  // pinned (cudaHostAlloc)
  size_t staging_bytes_ = 0;
  cudaEvent_t staging_done_ = nullptr;
};

}  // namespace linnet::cuda
