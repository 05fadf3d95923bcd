// CudaBackend: memory, argument checks, and dispatch to the kernels in
// elementwise.cu, attention.cu and logits.cu. No logging here (spdlog/fmt can't be included
// in .cu files under C++20): failures throw linnet::Error.
#include "core/cuda/cuda_backend.cuh"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/kernels.cuh"

namespace linnet {
namespace cuda {

// ---- errors --------------------------------------------------------------------------------
void cuda_failed(cudaError_t err, const char* expr, const char* file, int line) {
  throw Error(str("CUDA error ", static_cast<int>(err), " (", cudaGetErrorName(err), ": ",
                  cudaGetErrorString(err), ") in ", expr, " at ", file, ":", line));
}

#ifdef LINNET_HAVE_NCCL
void nccl_failed(ncclResult_t r, const char* expr, const char* file, int line) {
  throw Error(str("NCCL error ", static_cast<int>(r), " (", ncclGetErrorString(r), ") in ", expr,
                  " at ", file, ":", line));
}
#endif

// ---- memory pool ---------------------------------------------------------------------------
size_t MemoryPool::bucket(size_t bytes) {
  constexpr size_t kMin = 512, kMiB = size_t{1} << 20;
  if (bytes <= kMin) return kMin;
  if (bytes <= kMiB) {  // powers of two
    size_t b = kMin;
    while (b < bytes) b <<= 1;
    return b;
  }
  if (bytes <= 256 * kMiB) {  // eight steps per power of two: at most 12.5% slack
    size_t p = kMiB;
    while (p * 2 < bytes) p <<= 1;
    const size_t step = p / 8;
    return (bytes + step - 1) / step * step;
  }
  const size_t step = 2 * kMiB;  // large, long-lived blocks (weights, the KV cache)
  return (bytes + step - 1) / step * step;
}

void* MemoryPool::allocate(size_t b) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(b);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= b;
      in_use_ += b;
      return p;
    }
  }
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, b);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it, give back the cache and try once more
    free_cached();
    err = cudaMalloc(&p, b);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t in_use, cached;
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_use = in_use_;
      cached = cached_;
    }
    throw Error(str("cuda: cannot allocate ", b, " bytes on device ", device_, " (",
                    cudaGetErrorString(err), "; ", in_use, " bytes in use by linnet, ", cached,
                    " cached)"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  in_use_ += b;
  ++mallocs_;
  return p;
}

void MemoryPool::release(void* p, size_t b) {
  std::lock_guard<std::mutex> lock(mu_);
  free_[b].push_back(p);
  in_use_ -= b;
  cached_ += b;
}

void MemoryPool::free_cached() {
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks.swap(free_);
    cached_ = 0;
  }
  if (blocks.empty()) return;
  int prev = 0;
  cudaGetDevice(&prev);
  cudaSetDevice(device_);
  for (auto& [size, list] : blocks)
    for (void* p : list) cudaFree(p);  // errors ignored: nothing useful to do with them here
  cudaSetDevice(prev);
  cudaGetLastError();
}

MemoryPool::~MemoryPool() { free_cached(); }

size_t MemoryPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}
size_t MemoryPool::bytes_cached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}
size_t MemoryPool::mallocs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mallocs_;
}

// ---- argument checks -----------------------------------------------------------------------
namespace {

int dt(const Tensor& t) { return static_cast<int>(t.dtype()); }

[[noreturn]] void need_failed(const char* op, const std::string& what) { throw Error(str("cuda ", op, ": ", what)); }
// The message is built only when the check fails: a decode step runs hundreds of checks.
#define need(ok, op, what)                   \
  do {                                       \
    if (!(ok)) need_failed((op), (what));    \
  } while (0)

void on_device(const char* op, const char* name, const Tensor& t) {
  need(t.defined(), op, str(name, " is undefined"));
  need(t.device() == Device::cuda, op, str(name, " ", t.describe(), " is not on the cuda device"));
}

void rank_is(const char* op, const char* name, const Tensor& t, size_t r) {
  on_device(op, name, t);
  need(t.rank() == r, op, str(name, " ", t.describe(), " should have rank ", r));
}

void dtype_is(const char* op, const char* name, const Tensor& t, DType d) {
  need(t.dtype() == d, op, str(name, " ", t.describe(), " should be ", dtype_name(d)));
}

void float_type(const char* op, const char* name, const Tensor& t) {
  need(is_float(t.dtype()), op, str(name, " ", t.describe(), " should have a float dtype"));
}

void act_type(const char* op, const char* name, const Tensor& t) {
  need(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16, op,
       str(name, " ", t.describe(), " should be f32, bf16 or f16"));
}

// An i32 index vector of n entries.
void index_vec(const char* op, const char* name, const Tensor& t, int64_t n) {
  on_device(op, name, t);
  dtype_is(op, name, t, DType::i32);
  need(t.numel() == n, op, str(name, " ", t.describe(), " should hold ", n, " entries"));
}

void check_dims(const char* op, const AttentionDims& d) {
  need(d.q_heads > 0 && d.kv_heads > 0 && d.q_heads % d.kv_heads == 0, op,
       str("q_heads ", d.q_heads, " should be a positive multiple of kv_heads ", d.kv_heads));
  need(d.head_dim > 0 && d.head_dim <= 256, op,
       str("head_dim ", d.head_dim, " is not supported (1 … 256)"));
  need(d.window >= 0 && d.softcap >= 0, op, str("window ", d.window, " and softcap ", d.softcap, " must be ≥ 0"));
}

void check_cache(const char* op, const AttentionDims& d, const Tensor& qkv, const Tensor& ck,
                 const Tensor& cv) {
  need(d.page_size > 0 && d.max_seq > 0 && d.max_seq % d.page_size == 0, op,
       str("max_seq ", d.max_seq, " should be a positive multiple of page_size ", d.page_size));
  rank_is(op, "cache_k", ck, 4);
  rank_is(op, "cache_v", cv, 4);
  need(ck.shape() == cv.shape(), op, str("cache_k ", ck.describe(), " and cache_v ",
                                         cv.describe(), " differ"));
  need(ck.dim(1) == d.kv_heads && ck.dim(2) == d.max_seq && ck.dim(3) == d.head_dim, op,
       str("cache ", ck.describe(), " should be [rows, ", d.kv_heads, ", ", d.max_seq, ", ",
           d.head_dim, "]"));
  need(ck.dtype() == qkv.dtype() && cv.dtype() == qkv.dtype(), op,
       str("cache dtype ", dtype_name(ck.dtype()), " should match qkv ", qkv.describe()));
}

cuda::AttnGeom geom(const AttentionDims& d, int64_t cache_rows) {
  cuda::AttnGeom g;
  g.q_heads = static_cast<int>(d.q_heads);
  g.kv_heads = static_cast<int>(d.kv_heads);
  g.head_dim = static_cast<int>(d.head_dim);
  g.max_seq = d.max_seq;
  g.page_size = d.page_size;
  g.cache_rows = cache_rows;
  g.row_run = d.row_run;
  g.scale = d.score_scale();
  g.softcap = d.softcap;
  g.window = d.window;
  return g;
}

int64_t rows_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.dim(0); }

}  // namespace

// ---- the backend ---------------------------------------------------------------------------
CudaBackend::CudaBackend(int device) : device_(device) {
  if (const char* m = std::getenv("LINNET_CUDA_MATMUL")) {
    const std::string v = m;
    if (v != "auto" && v != "simt")
      throw Error(str("LINNET_CUDA_MATMUL=", v, ": expected auto (tensor cores for 16-bit products) or simt"));
    tensor_cores_ = v == "auto";
  }
  LINNET_CUDA_CHECK(cudaSetDevice(device_));
  LINNET_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  pool_ = std::make_shared<MemoryPool>(device_);
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  if (stream_) cudaStreamDestroy(stream_);
  if (staging_done_) cudaEventDestroy(staging_done_);
  if (staging_) cudaFreeHost(staging_);
  cudaGetLastError();
  // pool_ lives on while tensors hold blocks of it.
}

void CudaBackend::activate() const { LINNET_CUDA_CHECK(cudaSetDevice(device_)); }

std::string CudaBackend::name() const { return str("cuda:", device_); }

std::string CudaBackend::device_id() const {
  cudaDeviceProp prop{};
  LINNET_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  static const char* hex = "0123456789abcdef";
  std::string id = "GPU-";
  for (int i = 0; i < 16; ++i) {
    const auto b = static_cast<unsigned char>(prop.uuid.bytes[i]);
    id += hex[b >> 4];
    id += hex[b & 15];
  }
  return id;
}

int64_t CudaBackend::memory_available() const {
  activate();
  size_t free = 0, total = 0;
  LINNET_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(free + pool_->bytes_cached());
}

DType CudaBackend::compute_dtype(DType weights) const { return backend_compute_dtype("cuda", weights); }

Tensor CudaBackend::empty(const Shape& shape, DType dtype) {
  for (auto d : shape.dims())
    if (d < 0) throw Error(str("cuda empty: negative dimension in ", shape.to_string()));
  activate();
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  const size_t b = MemoryPool::bucket(bytes);
  auto st = std::make_shared<Storage>();
  st->data = pool_->allocate(b);
  st->bytes = bytes;
  st->device = Device::cuda;
  std::shared_ptr<MemoryPool> pool = pool_;
  st->release = [pool, b](void* p) { pool->release(p, b); };
  return Tensor(std::move(st), 0, shape, dtype);
}

Tensor CudaBackend::upload(const Tensor& host) {
  need(host.defined(), "upload", "tensor is undefined");
  Tensor t = empty(host.shape(), host.dtype());
  if (t.nbytes() == 0) return t;
  const cudaMemcpyKind kind =
      host.device() == Device::cuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
  LINNET_CUDA_CHECK(cudaMemcpyAsync(t.data(), host.data(), t.nbytes(), kind, stream_));
  return t;
}

void CudaBackend::copy_from_host(const Tensor& host, Tensor& dst) {
  need(host.defined() && dst.defined() && host.dtype() == dst.dtype() && host.nbytes() == dst.nbytes(),
       "copy_from_host", host.describe() + " → " + dst.describe());
  need(dst.device() == Device::cuda, "copy_from_host", "destination must be a device tensor");
  if (dst.nbytes() == 0) return;
  activate();
  // Pageable source: the call returns once the bytes are staged, so `host` may go after it.
  LINNET_CUDA_CHECK(cudaMemcpyAsync(dst.data(), host.data(), dst.nbytes(),
                                    host.device() == Device::cuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice,
                                    stream_));
}

Tensor CudaBackend::to_host(const Tensor& t) {
  need(t.defined(), "to_host", "tensor is undefined");
  if (t.device() == Device::cpu) return t.clone();
  activate();
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  if (t.nbytes() > 0)
    LINNET_CUDA_CHECK(cudaMemcpyAsync(h.data(), t.data(), t.nbytes(), cudaMemcpyDeviceToHost, stream_));
  LINNET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return h;
}

char* CudaBackend::staging(size_t bytes) {
  activate();
  if (staging_done_ == nullptr) LINNET_CUDA_CHECK(cudaEventCreateWithFlags(&staging_done_, cudaEventDisableTiming));
  LINNET_CUDA_CHECK(cudaEventSynchronize(staging_done_));  // the last staged copy is done with it
  if (bytes > staging_bytes_) {
    if (staging_) LINNET_CUDA_CHECK(cudaFreeHost(staging_));
    staging_bytes_ = std::max(bytes, size_t{1} << 16) * 2;
    LINNET_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&staging_), staging_bytes_, cudaHostAllocDefault));
  }
  return staging_;
}

namespace {
size_t aligned_bytes(size_t n) { return (n + 255) / 256 * 256; }  // each piece 256-byte aligned
}  // namespace

std::vector<Tensor> CudaBackend::upload_many(const std::vector<Tensor>& hosts) {
  size_t total = 0;
  for (const auto& h : hosts) {
    need(h.defined() && h.device() == Device::cpu, "upload_many", "tensors must be host tensors");
    total += aligned_bytes(h.nbytes());
  }
  if (total == 0) return Backend::upload_many(hosts);
  char* stage = staging(total);
  // One device block, one copy: each tensor a view at its offset.
  Tensor block = empty({static_cast<int64_t>(total / 4)}, DType::f32);
  size_t at = 0;
  for (const auto& h : hosts) {
    std::memcpy(stage + at, h.data(), h.nbytes());
    at += aligned_bytes(h.nbytes());
  }
  LINNET_CUDA_CHECK(cudaMemcpyAsync(block.data(), stage, total, cudaMemcpyHostToDevice, stream_));
  LINNET_CUDA_CHECK(cudaEventRecord(staging_done_, stream_));
  std::vector<Tensor> out;
  at = 0;
  for (const auto& h : hosts) {
    out.push_back(Tensor(block.storage(), at, h.shape(), h.dtype()));
    at += aligned_bytes(h.nbytes());
  }
  return out;
}

std::vector<Tensor> CudaBackend::to_host_many(const std::vector<Tensor>& ts) {
  size_t total = 0;
  for (const auto& t : ts) {
    need(t.defined() && t.device() == Device::cuda, "to_host_many", "tensors must be device tensors");
    total += aligned_bytes(t.nbytes());
  }
  char* stage = staging(total);
  size_t at = 0;
  for (const auto& t : ts) {
    if (t.nbytes() > 0)
      LINNET_CUDA_CHECK(cudaMemcpyAsync(stage + at, t.data(), t.nbytes(), cudaMemcpyDeviceToHost, stream_));
    at += aligned_bytes(t.nbytes());
  }
  LINNET_CUDA_CHECK(cudaEventRecord(staging_done_, stream_));
  LINNET_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the one wait
  std::vector<Tensor> out;
  at = 0;
  for (const auto& t : ts) {
    Tensor h = Tensor::empty(t.shape(), t.dtype());
    std::memcpy(h.data(), stage + at, t.nbytes());
    out.push_back(std::move(h));
    at += aligned_bytes(t.nbytes());
  }
  return out;
}

void CudaBackend::fill_zero(Tensor& t) {
  on_device("fill_zero", "t", t);
  activate();
  if (t.nbytes() > 0) LINNET_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, t.nbytes(), stream_));
}

void CudaBackend::release_cached_memory() { pool_->free_cached(); }

namespace {
// Event pairs on the backend's stream; seconds() waits for the last and sums them.
class EventTimer final : public DeviceTimer {
 public:
  EventTimer(int device, cudaStream_t s) : device_(device), stream_(s) {}
  ~EventTimer() override { reset(); }
  void start() override { pairs_.push_back({record(), nullptr}); }
  void stop() override { pairs_.back().second = record(); }
  double seconds() override {
    double total = 0;
    for (auto [a, b] : pairs_) {
      if (!b) continue;
      LINNET_CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      LINNET_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      total += ms / 1e3;
    }
    return total;
  }
  void reset() override {
    for (auto [a, b] : pairs_) {
      cudaEventDestroy(a);
      if (b) cudaEventDestroy(b);
    }
    pairs_.clear();
  }

 private:
  cudaEvent_t record() {
    LINNET_CUDA_CHECK(cudaSetDevice(device_));
    cudaEvent_t e = nullptr;
    LINNET_CUDA_CHECK(cudaEventCreate(&e));
    LINNET_CUDA_CHECK(cudaEventRecord(e, stream_));
    return e;
  }
  int device_;
  cudaStream_t stream_;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> pairs_;
};
}  // namespace

std::unique_ptr<DeviceTimer> CudaBackend::make_timer() { return std::make_unique<EventTimer>(device_, stream_); }

void CudaBackend::synchronize() {
  activate();
  LINNET_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::convert(const Tensor& src, Tensor& dst) {
  on_device("convert", "src", src);
  on_device("convert", "dst", dst);
  need(src.numel() == dst.numel(), "convert",
       str("src ", src.describe(), " and dst ", dst.describe(), " differ in size"));
  activate();
  if (src.numel() == 0) return;
  if (src.dtype() == dst.dtype()) {
    if (src.data() != dst.data())
      LINNET_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(),
                                        cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  cuda::launch_convert(src.data(), dt(src), dst.data(), dt(dst), src.numel(), stream_);
}

void CudaBackend::embedding(const Tensor& weight, const Tensor& ids, Tensor& out) {
  const char* op = "embedding";
  rank_is(op, "weight", weight, 2);
  float_type(op, "weight", weight);
  rank_is(op, "out", out, 2);
  float_type(op, "out", out);
  index_vec(op, "ids", ids, out.dim(0));
  need(out.dim(1) == weight.dim(1), op,
       str("out ", out.describe(), " and weight ", weight.describe(), " differ in width"));
  activate();
  cuda::launch_embedding(weight.data(), dt(weight), weight.dim(0), ids.ptr<int32_t>(), out.data(),
                         dt(out), out.dim(0), out.dim(1), stream_);
}

void CudaBackend::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  const char* op = "matmul";
  rank_is(op, "x", x, 2);
  rank_is(op, "w", w, 2);
  rank_is(op, "out", out, 2);
  float_type(op, "x", x);
  float_type(op, "w", w);
  float_type(op, "out", out);
  const int64_t N = x.dim(0), In = x.dim(1), Out = w.dim(0);
  need(w.dim(1) == In, op, str("x ", x.describe(), " and w ", w.describe(), " differ in In"));
  need(out.dim(0) == N && out.dim(1) == Out, op,
       str("out ", out.describe(), " should be [", N, ", ", Out, "]"));
  if (bias) {
    on_device(op, "bias", *bias);
    float_type(op, "bias", *bias);
    need(bias->numel() == Out, op, str("bias ", bias->describe(), " should hold ", Out, " entries"));
  }
  activate();
  if (N == 0 || Out == 0) return;
  // Kernels chosen by dtypes, never by N alone unless they give the same bits: a row alone
  // or among others gets the same result (docs/numerics.md).
  const void* b = bias ? bias->data() : nullptr;
  const int bdt = bias ? dt(*bias) : 0;
  if (tensor_cores_ && cuda::matmul_tc_applies(dt(x), dt(w)))
    cuda::launch_matmul_tc(x.data(), dt(x), w.data(), b, bdt, out.data(), dt(out), N, In, Out, stream_);
  else
    cuda::launch_matmul(x.data(), dt(x), w.data(), dt(w), b, bdt, out.data(), dt(out), N, In, Out, stream_);
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  const char* op = "rms_norm";
  rank_is(op, "x", x, 2);
  act_type(op, "x", x);
  rank_is(op, "out", out, 2);
  on_device(op, "w", w);
  float_type(op, "w", w);
  need(out.shape() == x.shape() && out.dtype() == x.dtype(), op,
       str("out ", out.describe(), " should match x ", x.describe()));
  need(w.numel() == x.dim(1), op, str("w ", w.describe(), " should hold ", x.dim(1), " entries"));
  activate();
  cuda::launch_rms_norm(dt(x), const_cast<void*>(x.data()), nullptr, w.data(), dt(w), eps,
                        out.data(), x.dim(0), x.dim(1), stream_);
}

void CudaBackend::add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& w, float eps,
                               Tensor& out) {
  const char* op = "add_rms_norm";
  rank_is(op, "residual", residual, 2);
  act_type(op, "residual", residual);
  on_device(op, "delta", delta);
  rank_is(op, "out", out, 2);
  on_device(op, "w", w);
  float_type(op, "w", w);
  need(delta.shape() == residual.shape() && delta.dtype() == residual.dtype(), op,
       str("delta ", delta.describe(), " should match residual ", residual.describe()));
  need(out.shape() == residual.shape() && out.dtype() == residual.dtype(), op,
       str("out ", out.describe(), " should match residual ", residual.describe()));
  need(w.numel() == residual.dim(1), op,
       str("w ", w.describe(), " should hold ", residual.dim(1), " entries"));
  activate();
  cuda::launch_rms_norm(dt(residual), residual.data(), delta.data(), w.data(), dt(w), eps,
                        out.data(), residual.dim(0), residual.dim(1), stream_);
}

void CudaBackend::add(Tensor& x, const Tensor& y) {
  const char* op = "add";
  on_device(op, "x", x);
  on_device(op, "y", y);
  act_type(op, "x", x);
  need(x.numel() == y.numel() && x.dtype() == y.dtype(), op,
       str("y ", y.describe(), " should match x ", x.describe()));
  activate();
  cuda::launch_add(dt(x), x.data(), y.data(), x.numel(), stream_);
}

void CudaBackend::rope_heads(Tensor& x, int64_t head_begin, int64_t heads, int64_t head_dim,
                             const Tensor& positions, const Tensor& inv_freq, float scale) {
  const char* op = "rope";
  rank_is(op, "x", x, 2);
  act_type(op, "x", x);
  on_device(op, "inv_freq", inv_freq);
  float_type(op, "inv_freq", inv_freq);
  index_vec(op, "positions", positions, x.dim(0));
  const bool per_token = inv_freq.rank() == 2;
  need(inv_freq.rank() == 1 || (per_token && inv_freq.dim(0) == x.dim(0)), op,
       str("inv_freq ", inv_freq.describe(), " should be [R/2] or [", x.dim(0), ", R/2]"));
  const int64_t half = inv_freq.dim(inv_freq.rank() - 1), D = head_dim;
  need(half > 0 && 2 * half <= D && head_begin >= 0 && heads >= 0 && (head_begin + heads) * D <= x.dim(1), op,
       str("heads [", head_begin, ", ", head_begin + heads, ") of dim ", D, " (rotary ", 2 * half,
           ") do not fit x ", x.describe()));
  activate();
  cuda::launch_rope(dt(x), x.data(), x.dim(0), x.dim(1), head_begin, heads, D, half, positions.ptr<int32_t>(),
                    inv_freq.data(), dt(inv_freq), per_token, scale, stream_);
}

void CudaBackend::swiglu(const Tensor& gate_up, Tensor& out) {
  const char* op = "swiglu";
  rank_is(op, "gate_up", gate_up, 2);
  rank_is(op, "out", out, 2);
  act_type(op, "gate_up", gate_up);
  need(out.dtype() == gate_up.dtype() && out.dim(0) == gate_up.dim(0) &&
           gate_up.dim(1) == 2 * out.dim(1),
       op, str("gate_up ", gate_up.describe(), " and out ", out.describe(), " disagree"));
  activate();
  cuda::launch_swiglu(dt(out), gate_up.data(), out.data(), out.dim(0), out.dim(1), stream_);
}

void CudaBackend::geglu(const Tensor& gate_up, Tensor& out) {
  const char* op = "geglu";
  rank_is(op, "gate_up", gate_up, 2);
  rank_is(op, "out", out, 2);
  act_type(op, "gate_up", gate_up);
  need(out.dtype() == gate_up.dtype() && out.dim(0) == gate_up.dim(0) && gate_up.dim(1) == 2 * out.dim(1), op,
       str("gate_up ", gate_up.describe(), " and out ", out.describe(), " disagree"));
  activate();
  cuda::launch_geglu(dt(out), gate_up.data(), out.data(), out.dim(0), out.dim(1), stream_);
}

void CudaBackend::pointwise(Tensor& x, Pointwise p, float value) {
  const char* op = "pointwise";
  on_device(op, "x", x);
  act_type(op, "x", x);
  activate();
  cuda::launch_pointwise(dt(x), x.data(), x.numel(), static_cast<int>(p), value, stream_);
}

void CudaBackend::sum_squares(const Tensor& x, int64_t col_begin, int64_t cols, Tensor& out) {
  const char* op = "sum_squares";
  rank_is(op, "x", x, 2);
  act_type(op, "x", x);
  on_device(op, "out", out);
  dtype_is(op, "out", out, DType::f32);
  need(col_begin >= 0 && cols >= 0 && col_begin + cols <= x.dim(1) && out.numel() == x.dim(0), op,
       str("columns [", col_begin, ", ", col_begin + cols, ") of x ", x.describe(), " into ", out.describe()));
  activate();
  cuda::launch_sum_squares(dt(x), x.data(), x.dim(0), x.dim(1), col_begin, cols, out.ptr<float>(), stream_);
}

void CudaBackend::rms_norm_cols(Tensor& x, int64_t col_begin, int64_t groups, int64_t width, const Tensor& w,
                                float eps, const Tensor* sum_sq, int64_t count) {
  const char* op = "rms_norm_cols";
  rank_is(op, "x", x, 2);
  act_type(op, "x", x);
  on_device(op, "w", w);
  float_type(op, "w", w);
  need(col_begin >= 0 && groups >= 0 && width > 0 && col_begin + groups * width <= x.dim(1) && w.numel() == width,
       op, str(groups, " groups of ", width, " columns from ", col_begin, " of x ", x.describe(), ", w ", w.describe()));
  if (sum_sq) {
    on_device(op, "sum_sq", *sum_sq);
    dtype_is(op, "sum_sq", *sum_sq, DType::f32);
    need(sum_sq->numel() == x.dim(0) * groups && count > 0, op,
         str("sum_sq ", sum_sq->describe(), " should hold ", x.dim(0) * groups, " entries"));
  }
  activate();
  cuda::launch_rms_norm_cols(dt(x), x.data(), x.dim(0), x.dim(1), col_begin, groups, width, w.data(), dt(w), eps,
                             sum_sq ? sum_sq->ptr<float>() : nullptr, count, stream_);
}

void CudaBackend::kv_write(const Tensor& qkv, const AttentionDims& dims, const Tensor& slots,
                           Tensor& cache_k, Tensor& cache_v) {
  const char* op = "kv_write";
  check_dims(op, dims);
  rank_is(op, "qkv", qkv, 2);
  act_type(op, "qkv", qkv);
  need(qkv.dim(1) == dims.qkv_width(), op,
       str("qkv ", qkv.describe(), " should have width ", dims.qkv_width()));
  index_vec(op, "slots", slots, qkv.dim(0));
  check_cache(op, dims, qkv, cache_k, cache_v);
  activate();
  cuda::launch_kv_write(dt(qkv), qkv.data(), qkv.dim(0), geom(dims, cache_k.dim(0)),
                        slots.ptr<int32_t>(), cache_k.data(), cache_v.data(), stream_);
}

void CudaBackend::attention_packed(const Tensor& qkv, const AttentionDims& dims,
                                   const Tensor& run_start, Tensor& out) {
  const char* op = "attention_packed";
  check_dims(op, dims);
  rank_is(op, "qkv", qkv, 2);
  act_type(op, "qkv", qkv);
  need(qkv.dim(1) == dims.qkv_width(), op,
       str("qkv ", qkv.describe(), " should have width ", dims.qkv_width()));
  index_vec(op, "run_start", run_start, qkv.dim(0));
  rank_is(op, "out", out, 2);
  need(out.dtype() == qkv.dtype() && out.dim(0) == qkv.dim(0) &&
           out.dim(1) == dims.q_heads * dims.head_dim,
       op, str("out ", out.describe(), " should be [", qkv.dim(0), ", ",
               dims.q_heads * dims.head_dim, "; ", dtype_name(qkv.dtype()), "]"));
  activate();
  cuda::launch_attention_packed(dt(qkv), qkv.data(), qkv.dim(0), geom(dims, 0),
                                run_start.ptr<int32_t>(), out.data(), stream_);
}

void CudaBackend::attention_cache(const Tensor& qkv, const AttentionDims& dims, const Tensor& rows,
                                  const Tensor& positions, const Tensor& table,
                                  const Tensor& cache_k, const Tensor& cache_v, Tensor& out) {
  const char* op = "attention_cache";
  check_dims(op, dims);
  rank_is(op, "qkv", qkv, 2);
  act_type(op, "qkv", qkv);
  need(qkv.dim(1) == dims.qkv_width(), op,
       str("qkv ", qkv.describe(), " should have width ", dims.qkv_width()));
  const int64_t N = qkv.dim(0);
  index_vec(op, "rows", rows, N);
  index_vec(op, "positions", positions, N);
  rank_is(op, "table", table, 2);
  dtype_is(op, "table", table, DType::i32);
  check_cache(op, dims, qkv, cache_k, cache_v);
  rank_is(op, "out", out, 2);
  need(out.dtype() == qkv.dtype() && out.dim(0) == N && out.dim(1) == dims.q_heads * dims.head_dim,
       op, str("out ", out.describe(), " should be [", N, ", ", dims.q_heads * dims.head_dim, "; ",
               dtype_name(qkv.dtype()), "]"));
  activate();
  if (N == 0) return;
  const cuda::AttnGeom g = geom(dims, cache_k.dim(0));
  // The splits cover the positions this call reaches (dims.span: its longest position + 1),
  // else every position the table reaches (0 … Pages·page_size − 1): at batch 1, context 8K
  // and MaxSeq 131072, splits sized by MaxSeq would leave all but a few blocks idle.
  const int64_t span = dims.span > 0 ? dims.span : std::max(dims.max_seq, table.dim(1) * dims.page_size);
  const int splits = cuda::attention_cache_splits(span);
  // The partials take N · q_heads · splits · (D + 2) floats: 17 GB for a 16K-token prefill of
  // Llama-3-8B at once. Tokens go in chunks whose workspace stays under 256 MiB (a token's
  // arithmetic does not depend on its chunk), the one buffer reused in stream order.
  const int64_t per_token = cuda::attention_cache_workspace(1, g, splits);
  const int64_t chunk = std::clamp<int64_t>((int64_t{64} << 20) / std::max<int64_t>(per_token, 1), 1, N);
  Tensor ws = empty({per_token * chunk}, DType::f32);
  const auto* q = static_cast<const char*>(qkv.data());
  auto* o = static_cast<char*>(out.data());
  const size_t q_row = dtype_size(qkv.dtype()) * qkv.dim(1), o_row = dtype_size(out.dtype()) * out.dim(1);
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t n = std::min(chunk, N - n0);
    cuda::launch_attention_cache(dt(qkv), q + n0 * q_row, n, g, rows.ptr<int32_t>() + n0,
                                 positions.ptr<int32_t>() + n0, table.ptr<int32_t>(), table.dim(0),
                                 table.dim(1), cache_k.data(), cache_v.data(), o + n0 * o_row,
                                 ws.ptr<float>(), splits, stream_);
  }
}

void CudaBackend::gather_rows(const Tensor& src, const Tensor& index, Tensor& out) {
  const char* op = "gather_rows";
  on_device(op, "src", src);
  on_device(op, "out", out);
  need(src.rank() >= 1 && out.rank() == src.rank() && out.dtype() == src.dtype(), op,
       str("out ", out.describe(), " and src ", src.describe(), " disagree"));
  for (size_t i = 1; i < src.rank(); ++i)
    need(out.dim(i) == src.dim(i), op,
         str("out ", out.describe(), " and src ", src.describe(), " differ in row shape"));
  index_vec(op, "index", index, rows_of(out));
  activate();
  const int64_t row_bytes = src.dim(0) ? static_cast<int64_t>(src.nbytes()) / src.dim(0)
                                       : (out.dim(0) ? static_cast<int64_t>(out.nbytes()) / out.dim(0) : 0);
  cuda::launch_gather_rows(src.data(), src.dim(0), index.ptr<int32_t>(), out.data(), out.dim(0),
                           row_bytes, stream_);
}

void CudaBackend::copy_columns(const Tensor& src, Tensor& dst, int64_t col_begin, int64_t cols) {
  const char* op = "copy_columns";
  rank_is(op, "src", src, 2);
  rank_is(op, "dst", dst, 2);
  need(src.dim(0) == dst.dim(0), op, str("src ", src.describe(), " and dst ", dst.describe(),
                                         " differ in rows"));
  need(cols >= 0 && cols <= src.dim(1) && col_begin >= 0 && col_begin + cols <= dst.dim(1), op,
       str("columns [", col_begin, ", ", col_begin + cols, ") from ", src.describe(), " into ",
           dst.describe()));
  activate();
  const int64_t R = src.dim(0);
  if (R == 0 || cols == 0) return;
  if (src.dtype() == dst.dtype()) {
    const size_t es = dtype_size(src.dtype());
    LINNET_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(dst.data()) + col_begin * es,
                                        dst.dim(1) * es, src.data(), src.dim(1) * es, cols * es,
                                        R, cudaMemcpyDeviceToDevice, stream_));
  } else {
    cuda::launch_copy_columns(src.data(), dt(src), src.dim(1), dst.data(), dt(dst), dst.dim(1), R,
                              col_begin, cols, stream_);
  }
}

namespace {
void check_logits(const char* op, const Tensor& logits, int64_t valid, int64_t vocab_offset) {
  rank_is(op, "logits", logits, 2);
  float_type(op, "logits", logits);
  need(valid >= 0 && valid <= logits.dim(1), op,
       str("valid ", valid, " is outside [0, ", logits.dim(1), "]"));
  need(vocab_offset >= 0 && vocab_offset + valid <= INT_MAX, op,
       str("vocab_offset ", vocab_offset, " is out of range"));
}
void f32_vec(const char* op, const char* name, const Tensor& t, int64_t n) {
  on_device(op, name, t);
  dtype_is(op, name, t, DType::f32);
  need(t.numel() == n, op, str(name, " ", t.describe(), " should hold ", n, " entries"));
}
}  // namespace

void CudaBackend::logit_stats(const Tensor& logits, int64_t valid, int64_t vocab_offset,
                              const Tensor& targets, Tensor& max, Tensor& sumexp,
                              Tensor& target_logit) {
  const char* op = "logit_stats";
  check_logits(op, logits, valid, vocab_offset);
  const int64_t N = logits.dim(0);
  index_vec(op, "targets", targets, N);
  f32_vec(op, "max", max, N);
  f32_vec(op, "sumexp", sumexp, N);
  f32_vec(op, "target_logit", target_logit, N);
  activate();
  cuda::launch_logit_stats(logits.data(), dt(logits), N, logits.dim(1), valid, vocab_offset,
                           targets.ptr<int32_t>(), max.ptr<float>(), sumexp.ptr<float>(),
                           target_logit.ptr<float>(), stream_);
}

void CudaBackend::argmax(const Tensor& logits, int64_t valid, int64_t vocab_offset, Tensor& value,
                         Tensor& index) {
  const char* op = "argmax";
  check_logits(op, logits, valid, vocab_offset);
  const int64_t N = logits.dim(0);
  f32_vec(op, "value", value, N);
  index_vec(op, "index", index, N);
  activate();
  cuda::launch_argmax(logits.data(), dt(logits), N, logits.dim(1), valid, vocab_offset, false, 0,
                      0, 0, 1.f, value.ptr<float>(), index.ptr<int32_t>(), stream_);
}

void CudaBackend::gumbel_max(const Tensor& logits, int64_t valid, int64_t vocab_offset,
                             uint64_t key0, uint64_t key1, int32_t step, float temperature,
                             Tensor& value, Tensor& index) {
  const char* op = "gumbel_max";
  check_logits(op, logits, valid, vocab_offset);
  need(temperature > 0.f, op, str("temperature ", temperature, " should be > 0"));
  const int64_t N = logits.dim(0);
  f32_vec(op, "value", value, N);
  index_vec(op, "index", index, N);
  activate();
  cuda::launch_argmax(logits.data(), dt(logits), N, logits.dim(1), valid, vocab_offset, true, key0,
                      key1, step, temperature, value.ptr<float>(), index.ptr<int32_t>(), stream_);
}

}  // namespace cuda

// ---- the module's entry points (core/cuda_module.h loads them) ------------------------------
// The device count, or 0 with the CUDA error that stands in the way (a driver older than this
// runtime, no device, …): the preflight reports it rather than skipping quietly.
extern "C" int linnet_cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = str("cudaGetDeviceCount: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
    cudaGetLastError();  // clear it, so asking again gives the same answer
    return 0;
  }
  return n;
}

extern "C" Backend* linnet_cuda_make_backend(int device) { return new cuda::CudaBackend(device); }

// "NVIDIA H200, sm_90, 139.8 GiB, GPU-…; driver 13.0, runtime 13.0" for `linnet devices`.
extern "C" void linnet_cuda_describe(int device, std::string* out) {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    *out = str("device ", device, ": cannot read its properties");
    return;
  }
  std::string uuid;
  static const char* hex = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    const auto b = static_cast<unsigned char>(p.uuid.bytes[i]);
    uuid += hex[b >> 4];
    uuid += hex[b & 15];
  }
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f GiB", static_cast<double>(p.totalGlobalMem) / (1 << 30));
  *out = str(p.name, ", sm_", p.major, p.minor, ", ", mem, ", ", p.multiProcessorCount, " SMs, GPU-", uuid, "; driver ",
             driver / 1000, ".", driver % 1000 / 10, ", runtime ", runtime / 1000, ".", runtime % 1000 / 10);
}

}  // namespace linnet
