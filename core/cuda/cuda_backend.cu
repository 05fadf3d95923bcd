// CudaBackend: memory, argument checks, and dispatch to the kernels in
// elementwise.cu, attention.cu and logits.cu. No logging here (spdlog/fmt can't be included
// in .cu files under C++20): failures throw linnet::Error.
//
// Every op checks its arguments when called (first the checks all ops share, generated from
// core/backend_op_list.h, then its own), then hands its launch to submit() as a typed record
// (core/cuda/launch_records.cuh): launched at once (LINNET_CUDA_GRAPHS=0), or recorded until
// the next flush — whatever touches the stream otherwise (a copy, a wait, a timer, a
// collective) flushes first — and then run through the GraphCache, which replays a recorded sequence it has seen before
// as one CUDA graph. A decode step (≈ 390 launches for Llama-3-8B) is then one graph launch
// between its plan's upload and its results' copy back.
#include "core/cuda/cuda_backend.cuh"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/kernels.cuh"
#include "core/op_checks.h"
#include "core/quantized_parts.h"

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
      // The lowest address of the bucket's free blocks, not the last freed: a sequence of
      // requests then gets the same blocks whenever it starts from the same free blocks, in
      // whatever order they were given back — so a decode step's launches (their pointers)
      // repeat exactly, step after step, and its CUDA graph is replayed (GraphCache).
      auto& list = it->second;
      auto lowest = std::min_element(list.begin(), list.end(), [](void* a, void* b) {
        return reinterpret_cast<uintptr_t>(a) < reinterpret_cast<uintptr_t>(b);
      });
      void* p = *lowest;
      *lowest = list.back();
      list.pop_back();
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
  std::function<void()> before;
  {
    std::lock_guard<std::mutex> lock(mu_);
    before = before_free_;
  }
  if (before) before();
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

// The checks every op shares, on each of its arguments (op: its label; names: its argument
// list as core/backend_op_list.h writes it, "(a, b, …)", read only when a check fails).
std::string arg_name(const char* names, int i) {
  std::string all(names + 1, std::strlen(names) - 2);  // without the parentheses
  size_t at = 0;
  for (int k = 0; k < i; ++k) at = all.find(',', at) + 1;
  const size_t end = all.find(',', at);
  std::string name = all.substr(at, end == std::string::npos ? std::string::npos : end - at);
  name.erase(0, name.find_first_not_of(' '));
  return name;
}
template <class A>
void check_arg(const char*, const char*, int, const A&) {}  // not a tensor
void check_arg(const char* op, const char* names, int i, const Tensor& t) {
  if (!t.defined() || t.device() != Device::cuda) on_device(op, arg_name(names, i).c_str(), t);
}
void check_arg(const char* op, const char* names, int i, const Tensor* t) {
  if (t) check_arg(op, names, i, *t);  // null: an optional tensor left out
}
template <class... A>
void check_args(const char* op, const char* names, const A&... args) {
  int i = 0;
  (check_arg(op, names, i++, args), ...);
}

void rank_is(const char* op, const char* name, const Tensor& t, size_t r) {
  on_device(op, name, t);
  need(t.rank() == r, op, str(name, " ", t.describe(), " should have rank ", r));
}

void float_type(const char* op, const char* name, const Tensor& t) {
  need(is_float(t.dtype()), op, str(name, " ", t.describe(), " should have a float dtype"));
}

void act_type(const char* op, const char* name, const Tensor& t) {
  need(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16, op,
       str(name, " ", t.describe(), " should be f32, bf16 or f16"));
}

// kv_dt: the dtype code K and V are held in (the cache's; attention_packed: round_kv's), -1 none.
cuda::AttnGeom geom(const AttentionDims& d, int64_t cache_rows, int kv_dt) {
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
  g.kv_dt = kv_dt;
  g.sinks = d.sinks ? d.sinks->ptr<float>() : nullptr;
  return g;
}


}  // namespace

// ---- options ---------------------------------------------------------------------------------
namespace {
// The variable's value among `allowed` (the first is what `on` stands for), or `fallback`
// when it is unset; anything else is refused by name.
std::string choice(const char* var, std::initializer_list<const char*> allowed, const std::string& fallback) {
  const char* v = std::getenv(var);
  if (!v) return fallback;
  std::string list;
  for (const char* a : allowed) {
    if (v == std::string(a)) return a;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  throw Error(str(var, "=", v, ": expected one of ", list));
}
}  // namespace

CudaOptions CudaOptions::from_environment() {
  CudaOptions o;
  const std::string legacy = choice("LINNET_CUDA_LEGACY", {"0", "1"}, "0");
  if (legacy == "1") {  // every path as it was before these switches
    o.matmul = Matmul::tc4;
    o.panel_raster = false;
    o.graphs = false;
    o.attention_prefetch = false;
    o.split_rows = false;
  }
  const std::string m = choice("LINNET_CUDA_MATMUL", {"auto", "tc4", "simt"}, legacy == "1" ? "tc4" : "auto");
  o.matmul = m == "simt" ? Matmul::simt : m == "tc4" ? Matmul::tc4 : Matmul::tensor_cores;
  o.panel_raster = choice("LINNET_CUDA_RASTER", {"panel", "columns"}, o.panel_raster ? "panel" : "columns") == "panel";
  o.graphs = choice("LINNET_CUDA_GRAPHS", {"1", "0"}, o.graphs ? "1" : "0") == "1";
  o.attention_prefetch =
      choice("LINNET_CUDA_ATTENTION", {"prefetch", "v1"}, o.attention_prefetch ? "prefetch" : "v1") == "prefetch";
  o.split_rows = choice("LINNET_CUDA_ROWS", {"split", "block"}, o.split_rows ? "split" : "block") == "split";
  // The piece of a token's keys one attention_cache block walks. Smaller pieces give a decode
  // step more blocks (Llama-3-8B at 2K keys: 8 head groups × 8 pieces of 256 = 64 blocks on 132
  // SMs); any value is batch invariant (a token's pieces come from its own length), but the bits
  // differ between values (another association of the combine).
  o.cache_split = std::stoi(choice("LINNET_CUDA_CACHE_SPLIT", {"256", "128", "64", "32"},
                                   std::to_string(o.cache_split)));
  o.fp8_cublaslt = choice("LINNET_CUDA_FP8", {"exact", "cublaslt"}, "exact") == "cublaslt";
  return o;
}

std::string CudaOptions::describe() const {
  return str("matmul ", matmul == Matmul::simt ? "simt" : matmul == Matmul::tc4 ? "tc4" : "auto", ", raster ",
             panel_raster ? "panel" : "columns", ", graphs ", graphs ? "on" : "off", ", attention ",
             attention_prefetch ? "prefetch" : "v1", ", rows ", split_rows ? "split" : "block", ", cache split ",
             cache_split, ", fp8 ", fp8_cublaslt ? "cublaslt" : "exact");
}

// ---- graphs of recorded launches ------------------------------------------------------------
namespace {
uint64_t hash_launches(const std::vector<Launch>& v) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ v.size();
  for (const Launch& l : v) h = hash_launch(h, l);
  return h;
}
}  // namespace

GraphCache::~GraphCache() {
  for (auto& e : graphs_)
    if (e.exec) cudaGraphExecDestroy(e.exec);  // one still running is freed when it is done
  cudaGetLastError();
}

void GraphCache::run(const std::vector<Launch>& launches, cudaStream_t s) {
  if (launches.empty()) return;
  const int64_t count = static_cast<int64_t>(launches.size());
  auto one_by_one = [&] {
    ++direct;
    launches_direct += count;
    for (const Launch& l : launches) run_launch(l, s);
  };
  if (launches.size() < kMinLaunches) return one_by_one();
  const uint64_t h = hash_launches(launches);
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if (it->hash != h || it->launches.size() != launches.size() ||
        !std::equal(launches.begin(), launches.end(), it->launches.begin(), same_launch))
      continue;
    LINNET_CUDA_CHECK(cudaGraphLaunch(it->exec, s));
    graphs_.splice(graphs_.begin(), graphs_, it);
    ++replays;
    launches_replayed += count;
    return;
  }
  if (seen_.size() > 4096) seen_.clear();
  if (recaptures_.size() > 4096) recaptures_.clear();
  // Captured on its second sighting; a sequence evicted and captured again and again (more
  // distinct sequences than the cache holds) stops being captured: launched directly, it
  // costs no instantiation per step.
  if (uncapturable_.count(h) || ++seen_[h] < 2) return one_by_one();
  if (++recaptures_[h] > 3) {
    uncapturable_[h] = true;
    return one_by_one();
  }
  cudaGraph_t graph = nullptr;
  LINNET_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  bool recorded = true;
  try {
    for (const Launch& l : launches) run_launch(l, s);
  } catch (...) {
    recorded = false;  // launched one by one below: a real error shows there again
  }
  cudaError_t e = cudaStreamEndCapture(s, &graph);
  cudaGraphExec_t exec = nullptr;
  if (recorded && e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
  if (graph) cudaGraphDestroy(graph);
  if (!recorded || e != cudaSuccess) {
    cudaGetLastError();
    if (exec) cudaGraphExecDestroy(exec);
    ++capture_failures;
    uncapturable_[h] = true;
    return one_by_one();
  }
  LINNET_CUDA_CHECK(cudaGraphLaunch(exec, s));
  ++captures;
  launches_replayed += count;
  graphs_.push_front(Entry{launches, exec, h});
  if (graphs_.size() > capacity_) {
    cudaGraphExecDestroy(graphs_.back().exec);
    graphs_.pop_back();
  }
}

// ---- the backend ---------------------------------------------------------------------------
CudaBackend::CudaBackend(int device) : device_(device), options_(CudaOptions::from_environment()) {
  LINNET_CUDA_CHECK(cudaSetDevice(device_));
  LINNET_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  pool_ = std::make_shared<MemoryPool>(device_);
  pool_->set_before_free([this] { flush(); });
  pending_.reserve(1024);
  if (options_.fp8_cublaslt) fp8_lt_ = std::make_unique<cuda::Fp8Lt>(device_);  // refused here, by name, if it cannot be
}

CudaBackend::~CudaBackend() {
  try {
    flush();
  } catch (const Error&) {  // nothing can be reported from a destructor; the work is dropped
    pending_.clear();
  }
  pool_->set_before_free(nullptr);
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
  flush();
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
  flush();
  activate();
  // Pageable source: the call returns once the bytes are staged, so `host` may go after it.
  LINNET_CUDA_CHECK(cudaMemcpyAsync(dst.data(), host.data(), dst.nbytes(),
                                    host.device() == Device::cuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice,
                                    stream_));
}

Tensor CudaBackend::to_host(const Tensor& t) {
  need(t.defined(), "to_host", "tensor is undefined");
  // (A quantized matrix's shape counts its weights, not its bytes: only the products read it.)
  need(!t.packed() || t.storage()->packed_weights == WeightFormat::dense, "to_host",
       "a quantized matrix is read by the products only, not copied back: " + t.describe());
  if (t.device() == Device::cpu) return t.clone();
  flush();
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
  flush();
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
  flush();
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
  if (t.nbytes() == 0) return;
  submit(launch::Memset{t.data(), static_cast<int64_t>(t.nbytes())});
}

void CudaBackend::release_cached_memory() { pool_->free_cached(); }

namespace {
// Event pairs on the backend's stream; seconds() waits for the last and sums them.
class EventTimer final : public DeviceTimer {
 public:
  EventTimer(int device, cudaStream_t s, std::function<void()> flush)
      : device_(device), stream_(s), flush_(std::move(flush)) {}
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
    flush_();  // the recorded launches before the event, not after it
    LINNET_CUDA_CHECK(cudaSetDevice(device_));
    cudaEvent_t e = nullptr;
    LINNET_CUDA_CHECK(cudaEventCreate(&e));
    LINNET_CUDA_CHECK(cudaEventRecord(e, stream_));
    return e;
  }
  int device_;
  cudaStream_t stream_;
  std::function<void()> flush_;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> pairs_;
};
}  // namespace

std::unique_ptr<DeviceTimer> CudaBackend::make_timer() {
  return std::make_unique<EventTimer>(device_, stream_, [this] { flush(); });
}

void CudaBackend::submit(const Launch& l) {
  if (!options_.graphs) {
    ++graphs_.launches_direct;
    run_launch(l, stream_);
    return;
  }
  pending_.push_back(l);
}

void CudaBackend::flush() {
  if (pending_.empty()) return;
  std::vector<Launch> work;
  work.swap(pending_);  // taken even if a launch throws: nothing runs twice
  activate();
  graphs_.run(work, stream_);
  work.clear();
  if (pending_.empty()) pending_.swap(work);  // keep the capacity
}

std::vector<std::pair<std::string, int64_t>> CudaBackend::counters() const {
  const int64_t total = graphs_.launches_direct + graphs_.launches_replayed;
  return {{"launches", total},
          {"launches_in_graphs", graphs_.launches_replayed},
          {"graph_replays", graphs_.replays},
          {"graph_captures", graphs_.captures},
          {"graph_capture_failures", graphs_.capture_failures},
          {"flushes_launched_one_by_one", graphs_.direct},
          {"graphs_cached", static_cast<int64_t>(graphs_.size())},
          {"grouped_matmul_weight_bytes", grouped_weight_bytes_},
          {"fp8_cublaslt_products", fp8_lt_ ? fp8_lt_->products : 0},
          {"fp8_cublaslt_shapes_refused", fp8_lt_ ? fp8_lt_->shapes_refused : 0}};
}

bool CudaBackend::random_normal(Tensor& out, uint64_t key, int64_t base, int64_t stride, float mean, float scale) {
  rank_is("random_normal", "out", out, 2);
  float_type("random_normal", "out", out);
  flush();
  activate();
  cuda::launch_random_normal(out.data(), dt(out), out.dim(0), out.dim(1), key, base, stride, mean, scale, stream_);
  return true;
}

Tensor CudaBackend::upload_matrix(const Tensor& host) {
  need(host.defined(), "upload_matrix", "tensor is undefined");
  if (host.device() == Device::cuda) return host;  // already here, row-major: the matrix itself
  return upload(host);
}

Tensor CudaBackend::upload_matrix(const std::vector<Tensor>& parts) {
  const char* op = "upload_matrix";
  need(!parts.empty(), op, "no parts");
  int64_t rows = 0;
  for (const auto& p : parts) {
    need(p.defined() && p.rank() == 2 && p.dim(1) == parts[0].dim(1) && p.dtype() == parts[0].dtype(), op,
         str("part ", p.describe(), " does not stack under ", parts[0].describe()));
    rows += p.dim(0);
  }
  Tensor out = empty({rows, parts[0].dim(1)}, parts[0].dtype());
  flush();
  activate();
  size_t at = 0;
  for (const auto& p : parts) {
    if (p.nbytes() > 0)  // a pageable host source is staged by the call: it may go after it
      LINNET_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(out.data()) + at, p.data(), p.nbytes(),
                                        p.device() == Device::cuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice,
                                        stream_));
    at += p.nbytes();
  }
  return out;
}

namespace {

// Where a quantized matrix's parts lie in its one allocation (cuda::QuantWeights), each
// 256-byte aligned: values, scales (f32; none for MXFP4), zeros (int4's zero points, MXFP4's
// exponents; a byte each), the group index (i32 a column) where there is one.
struct QuantizedBytes {
  size_t values = 0, scales = 0, zeros = 0, group_index = 0, total = 0;
};
QuantizedBytes quantized_bytes(WeightFormat f, int64_t rows, int64_t cols, int64_t groups, bool group_index) {
  auto up = [](size_t n) { return (n + 255) / 256 * 256; };
  const bool four_bit = f == WeightFormat::int4 || f == WeightFormat::mxfp4;
  const auto r = static_cast<size_t>(rows), c = static_cast<size_t>(cols), g = static_cast<size_t>(groups);
  QuantizedBytes b;
  b.scales = up(r * (four_bit ? (c + 1) / 2 : c));
  b.zeros = b.scales + up(f == WeightFormat::mxfp4 ? 0 : r * g * sizeof(float));
  b.group_index = b.zeros + up(four_bit ? r * g : 0);
  b.total = b.group_index + (group_index ? c * sizeof(int32_t) : 0);
  return b;
}

// The device matrix's parts as the kernels take them; row0: a view's first row.
cuda::QuantWeights quant_weights(const Tensor& w, int64_t& row0) {
  const Storage& st = *w.storage();
  const QuantizedBytes b = quantized_bytes(st.packed_weights, st.packed_rows, st.packed_cols, st.packed_groups,
                                           st.packed_group_index);
  const auto* base = static_cast<const uint8_t*>(st.data);
  const size_t off = static_cast<size_t>(static_cast<const uint8_t*>(w.data()) - base);
  const size_t row_bytes = Tensor(w.storage(), 0, {1, st.packed_cols}, w.dtype()).span_bytes();
  need(off % row_bytes == 0, "matmul", "a view of a quantized matrix that does not start on a row: " + w.describe());
  row0 = static_cast<int64_t>(off / row_bytes);
  cuda::QuantWeights q{};
  q.values = base;
  q.scales = st.packed_weights == WeightFormat::mxfp4 ? nullptr : reinterpret_cast<const float*>(base + b.scales);
  q.zeros = base + b.zeros;
  q.group_index = st.packed_group_index ? reinterpret_cast<const int32_t*>(base + b.group_index) : nullptr;
  q.cols = st.packed_cols;
  q.group = st.packed_block_cols;
  q.groups = st.packed_groups;
  q.format = static_cast<int32_t>(st.packed_weights);
  q.dequant = static_cast<int32_t>(st.packed_dequant);
  return q;
}

bool quantized(const Tensor& w) { return w.packed() && w.storage()->packed_weights != WeightFormat::dense; }

}  // namespace

Tensor CudaBackend::upload_quantized_matrix(const std::vector<QuantizedPart>& parts, const WeightLayout& layout) {
  QuantizedRows m = read_quantized_parts(parts, layout, "cuda");
  need(m.dequant == DType::f32 || m.dequant == DType::f16 || m.dequant == DType::bf16, "upload_quantized_matrix",
       str("weights rounded to ", dtype_name(m.dequant), " after their dequantization are not computed"));
  const bool four_bit = m.format == WeightFormat::int4 || m.format == WeightFormat::mxfp4;
  const QuantizedBytes b = quantized_bytes(m.format, m.rows, m.cols, m.groups, !m.group_index.empty());
  std::vector<uint8_t> host(b.total, 0);
  if (four_bit) {  // two a byte, the first in the low nibble
    const int64_t row_bytes = (m.cols + 1) / 2;
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t c = 0; c < m.cols; ++c)
        host[static_cast<size_t>(r * row_bytes + c / 2)] |= static_cast<uint8_t>(m.values[r * m.cols + c] << (4 * (c % 2)));
  } else {
    std::memcpy(host.data(), m.values.data(), m.values.size());
  }
  auto put = [&](size_t at, const void* src, size_t bytes) {  // (an empty part has no data pointer)
    if (bytes > 0) std::memcpy(host.data() + at, src, bytes);
  };
  put(b.scales, m.scales.data(), m.scales.size() * sizeof(float));
  put(b.zeros, m.zeros.data(), m.zeros.size());
  put(b.group_index, m.group_index.data(), m.group_index.size() * sizeof(int32_t));
  // LINNET_CUDA_FP8=cublaslt: FP8 blocks of 128×128 beside FP8 inputs in groups of 128 keep their
  // scales once more, in cuBLASLt's BLK128x128 layout, after the rest (cuda::Fp8Lt).
  size_t block128_at = 0;
  if (fp8_lt_ && m.format == WeightFormat::fp8 && m.activations.format == ActivationFormat::fp8 &&
      m.activations.group == 128) {
    const std::vector<float> blk = cuda::fp8_block128_scales(m.scales.data(), m.rows, m.cols, m.group);
    if (!blk.empty()) {
      block128_at = (b.total + 255) / 256 * 256;
      host.resize(block128_at + blk.size() * sizeof(float), 0);
      std::memcpy(host.data() + block128_at, blk.data(), blk.size() * sizeof(float));
    }
  }
  m.values = {};  // (the host copy holds them now)
  Tensor bytes = empty({static_cast<int64_t>(host.size())}, DType::u8);
  flush();
  activate();
  LINNET_CUDA_CHECK(cudaMemcpyAsync(bytes.data(), host.data(), host.size(), cudaMemcpyHostToDevice, stream_));
  LINNET_CUDA_CHECK(cudaStreamSynchronize(stream_));  // `host` goes at the return
  Storage& st = *bytes.storage();
  st.packed_cols = m.cols;
  st.packed_weights = m.format;
  st.packed_block_cols = m.group;
  st.packed_rows = m.rows;
  st.packed_groups = m.groups;
  st.packed_group_index = !m.group_index.empty();
  st.packed_dequant = m.dequant;
  st.activations = m.activations;
  st.packed_block128_scales = block128_at;
  const DType dt = m.format == WeightFormat::fp8 ? DType::f8_e4m3 : m.format == WeightFormat::int8 ? DType::i8 : DType::i32;
  return Tensor(bytes.storage(), 0, {m.rows, m.cols}, dt);
}

void CudaBackend::synchronize() {
  flush();
  activate();
  LINNET_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::convert_op(const Tensor& src, Tensor& dst) {
  activate();
  if (src.numel() == 0) return;
  if (src.dtype() == dst.dtype()) {
    if (src.data() == dst.data()) return;
    submit(launch::Memcpy{dst.data(), src.data(), static_cast<int64_t>(src.nbytes())});
  } else {
    submit(launch::Convert{src.data(), dst.data(), src.numel(), dt(src), dt(dst)});
  }
}

void CudaBackend::embedding_op(const Tensor& weight, const Tensor& ids, Tensor& out) {
  const char* op = "embedding";
  float_type(op, "weight", weight);
  float_type(op, "out", out);
  activate();
  submit(launch::Embedding{weight.data(), ids.ptr<int32_t>(), out.data(), weight.dim(0), out.dim(0), out.dim(1),
                           dt(weight), dt(out)});
}

void CudaBackend::matmul_op(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  const char* op = "matmul";
  float_type(op, "x", x);
  if (!quantized(w)) float_type(op, "w", w);
  float_type(op, "out", out);
  const int64_t N = x.dim(0), In = x.dim(1), Out = w.dim(0);
  if (bias) {
    float_type(op, "bias", *bias);
  }
  activate();
  if (N == 0 || Out == 0) return;
  if (quantized(w)) {
    // Dequantized as the weights load: on tensor cores where they are values of x's dtype (the
    // dense tensor-core product's bits on them), else in the SIMT tile; one kernel family for
    // every N either way.
    int64_t row0 = 0;
    const cuda::QuantWeights q = quant_weights(w, row0);
    const bool tc = options_.matmul == CudaOptions::Matmul::tensor_cores && cuda::matmul_tc_quantized_applies(dt(x), q);
    Tensor ws;  // the split-K product's chains (f32), given back to the pool after the call
    if (const int64_t n = tc ? cuda::matmul_tc_workspace(N, Out, cuda::TcChoice{}) : 0; n > 0) ws = empty({n}, DType::f32);
    submit(launch::MatmulQuantized{x.data(), bias ? bias->data() : nullptr, out.data(), ws.defined() ? ws.ptr<float>() : nullptr,
                                   N, In, Out, row0, q, dt(x), bias ? dt(*bias) : 0, dt(out),
                                   tc ? (options_.panel_raster ? 1 : 2) : 0});
    return;
  }
  // Kernels chosen by dtypes, never by N alone unless they give the same bits: a row alone
  // or among others gets the same result (docs/numerics.md).
  const void* b = bias ? bias->data() : nullptr;
  const int32_t b_dt = bias ? dt(*bias) : 0;
  if (options_.matmul != CudaOptions::Matmul::simt && cuda::matmul_tc_applies(dt(x), dt(w))) {
    cuda::TcChoice c;
    c.tc4 = options_.matmul == CudaOptions::Matmul::tc4;
    c.panel = options_.panel_raster;
    Tensor ws;  // the split-K product's chains (f32), given back to the pool after the call
    if (const int64_t n = cuda::matmul_tc_workspace(N, Out, c); n > 0) ws = empty({n}, DType::f32);
    submit(launch::MatmulTc{x.data(), w.data(), b, out.data(), ws.defined() ? ws.ptr<float>() : nullptr, N, In, Out,
                            dt(x), dt(w), b_dt, dt(out), c.tc4, c.panel});
  } else {
    submit(launch::MatmulSimt{x.data(), w.data(), b, out.data(), N, In, Out, dt(x), dt(w), b_dt, dt(out)});
  }
}

void CudaBackend::rms_norm_op(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  const char* op = "rms_norm";
  act_type(op, "x", x);
  float_type(op, "w", w);
  activate();
  // Without delta the kernel only reads x (rms_norm_kernel stores x only after adding delta).
  submit(launch::RmsNorm{const_cast<void*>(x.data()), nullptr, w.data(), out.data(), x.dim(0), x.dim(1), dt(x), dt(w),
                         eps, 0});
}

void CudaBackend::add_rms_norm_op(Tensor& residual, const Tensor& delta, const Tensor& w, float eps,
                               Tensor& out) {
  const char* op = "add_rms_norm";
  act_type(op, "residual", residual);
  float_type(op, "w", w);
  activate();
  submit(launch::RmsNorm{residual.data(), delta.data(), w.data(), out.data(), residual.dim(0), residual.dim(1),
                         dt(residual), dt(w), eps, 0});
}

void CudaBackend::add_op(Tensor& x, const Tensor& y) {
  const char* op = "add";
  act_type(op, "x", x);
  activate();
  submit(launch::Add{x.data(), y.data(), x.numel(), dt(x), 0});
}

void CudaBackend::rope_heads_op(Tensor& x, int64_t head_begin, int64_t heads, int64_t head_dim,
                             const Tensor& positions, const Tensor& inv_freq, float scale) {
  const char* op = "rope";
  act_type(op, "x", x);
  float_type(op, "inv_freq", inv_freq);
  const bool per_token = inv_freq.rank() == 2;
  const int64_t half = inv_freq.dim(inv_freq.rank() - 1), D = head_dim;
  activate();
  submit(launch::Rope{x.data(), positions.ptr<int32_t>(), inv_freq.data(), x.dim(0), x.dim(1), head_begin, heads, D,
                      half, dt(x), dt(inv_freq), per_token, scale});
}

void CudaBackend::swiglu_op(const Tensor& gate_up, Tensor& out) {
  const char* op = "swiglu";
  act_type(op, "gate_up", gate_up);
  activate();
  submit(launch::Swiglu{gate_up.data(), out.data(), out.dim(0), out.dim(1), dt(out), 0});
}

void CudaBackend::swiglu_clamped_op(const Tensor& gate_up, Tensor& out, float alpha, float limit) {
  const char* op = "swiglu_clamped";
  act_type(op, "gate_up", gate_up);
  activate();
  flush();  // launched directly (not a recorded Launch): after what is recorded before it
  cuda::launch_swiglu_clamped(dt(out), gate_up.data(), out.data(), out.dim(0), out.dim(1), alpha, limit, stream_);
}

void CudaBackend::causal_conv1d_op(const Tensor& x, const Tensor& weight, const Tensor& rows, const Tensor& keep,
                                   Tensor& state, Tensor& out) {
  const char* op = "causal_conv1d";
  act_type(op, "x", x);
  activate();
  flush();  // launched directly (not a recorded Launch): after what is recorded before it
  cuda::launch_causal_conv1d(x.data(), dt(x), weight.data(), dt(weight), rows.ptr<int32_t>(),
                             keep.defined() ? keep.ptr<int32_t>() : nullptr, state.ptr<float>(), out.data(), x.dim(0),
                             x.dim(1), weight.dim(1), state.dim(0), stream_);
}

void CudaBackend::gated_delta_rule_op(const Tensor& qkv, const Tensor& ab, const Tensor& a_log, const Tensor& dt_bias,
                                      const Tensor& rows, const Tensor& positions, const Tensor& keep,
                                      const DeltaNetDims& d, Tensor& state, Tensor& out) {
  const char* op = "gated_delta_rule";
  act_type(op, "qkv", qkv);
  activate();
  flush();
  cuda::launch_gated_delta_rule(qkv.data(), dt(qkv), ab.data(), a_log.data(), dt(a_log), dt_bias.data(), dt(dt_bias),
                                rows.ptr<int32_t>(), positions.defined() ? positions.ptr<int32_t>() : nullptr,
                                keep.defined() ? keep.ptr<int32_t>() : nullptr, state.ptr<float>(), out.data(),
                                qkv.dim(0), d.key_heads, d.key_dim, d.value_heads, d.value_dim, state.dim(0),
                                kDeltaRuleChunk, stream_);
}

void CudaBackend::rms_norm_gated_op(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& out) {
  const char* op = "rms_norm_gated";
  act_type(op, "x", x);
  activate();
  flush();
  cuda::launch_rms_norm_gated(x.data(), z.data(), dt(x), w.data(), dt(w), eps, out.data(), x.numel() / w.numel(),
                              w.numel(), stream_);
}

void CudaBackend::geglu_op(const Tensor& gate_up, Tensor& out) {
  const char* op = "geglu";
  act_type(op, "gate_up", gate_up);
  activate();
  flush();  // launched directly (not a recorded Launch): after what is recorded before it
  cuda::launch_geglu(dt(out), gate_up.data(), out.data(), out.dim(0), out.dim(1), stream_);
}

void CudaBackend::pointwise_op(Tensor& x, Pointwise p, float value) {
  const char* op = "pointwise";
  act_type(op, "x", x);
  activate();
  flush();  // launched directly (not a recorded Launch): after what is recorded before it
  cuda::launch_pointwise(dt(x), x.data(), x.numel(), static_cast<int>(p), value, stream_);
}

void CudaBackend::sigmoid_mul_op(Tensor& x, const Tensor& gate) {
  const char* op = "sigmoid_mul";
  act_type(op, "x", x);
  activate();
  flush();  // launched directly (not a recorded Launch): after what is recorded before it
  cuda::launch_sigmoid_mul(dt(x), x.data(), gate.data(), x.dim(0), x.dim(1), gate.dim(1), stream_);
}

void CudaBackend::scale_by_position_op(Tensor& x, int64_t col_begin, int64_t cols, const Tensor& positions, float beta,
                                       int64_t period) {
  const char* op = "scale_by_position";
  act_type(op, "x", x);
  activate();
  flush();  // launched directly (not a recorded Launch): after what is recorded before it
  cuda::launch_scale_by_position(dt(x), x.data(), x.dim(0), x.dim(1), col_begin, cols, positions.ptr<int32_t>(), beta,
                                 period, stream_);
}

void CudaBackend::sum_squares_op(const Tensor& x, int64_t col_begin, int64_t cols, Tensor& out) {
  const char* op = "sum_squares";
  act_type(op, "x", x);
  activate();
  flush();  // launched directly (not a recorded Launch): after what is recorded before it
  cuda::launch_sum_squares(dt(x), x.data(), x.dim(0), x.dim(1), col_begin, cols, out.ptr<float>(), stream_);
}

void CudaBackend::row_amax_op(const Tensor& x, Tensor& out) {
  act_type("row_amax", "x", x);
  activate();
  flush();  // launched directly (not a recorded Launch): after what is recorded before it
  cuda::launch_row_amax(dt(x), x.data(), x.dim(0), x.dim(1), out.ptr<float>(), stream_);
}

void CudaBackend::round_activations_op(const Tensor& x, const ActivationRounding& rounding, const Tensor* row_amax,
                                       Tensor& out) {
  act_type("round_activations", "x", x);
  activate();
  flush();
  cuda::launch_round_activations(dt(x), x.data(), x.dim(0), x.dim(1), rounding.format == ActivationFormat::fp8,
                                 rounding.group, row_amax ? row_amax->ptr<float>() : nullptr,
                                 rounding.stored ? rounding.scale : 0.0f, out.data(), stream_);
}

void CudaBackend::matmul_rounded_op(const Tensor& x, const ActivationRounding& rounding, const Tensor* row_amax,
                                    const Tensor& w, const Tensor* bias, Tensor& out) {
  act_type("matmul_rounded", "x", x);
  float_type("matmul_rounded", "out", out);
  if (bias) float_type("matmul_rounded", "bias", *bias);
  activate();
  if (fp8_lt_ && quantized(w) && x.dim(0) > 0) {
    cuda::Fp8LtProduct p{};
    p.x = x.data(), p.x_dt = dt(x), p.row_amax = row_amax ? row_amax->ptr<float>() : nullptr, p.rounding = rounding;
    p.w = quant_weights(w, p.row0);
    const Storage& st = *w.storage();
    if (st.packed_block128_scales > 0 && p.row0 % 128 == 0) {
      const int64_t padded = ((st.packed_cols + 127) / 128 + 3) / 4 * 4;
      p.block_scales = reinterpret_cast<const float*>(static_cast<const uint8_t*>(st.data) + st.packed_block128_scales) +
                       p.row0 / 128 * padded;
    }
    p.bias = bias ? bias->data() : nullptr, p.bias_dt = bias ? dt(*bias) : 0;
    p.out = out.data(), p.out_dt = dt(out);
    p.n = x.dim(0), p.in = x.dim(1), p.outs = w.dim(0);
    if (const cuda::Fp8LtScales mode = fp8_lt_->plan(p); mode != cuda::Fp8LtScales::none) {
      Tensor ws = empty({static_cast<int64_t>(cuda::Fp8Lt::workspace_bytes(p, mode))}, DType::u8);
      flush();  // launched directly, after what is recorded before it
      fp8_lt_->run(p, mode, ws.data(), stream_);
      return;
    }
  }
  Tensor rounded = empty(x.shape(), x.dtype());
  round_activations_op(x, rounding, row_amax, rounded);
  matmul_op(rounded, w, bias, out);
}

void CudaBackend::rms_norm_cols_op(Tensor& x, int64_t col_begin, int64_t groups, int64_t width, const Tensor& w,
                                float eps, const Tensor* sum_sq, int64_t count) {
  const char* op = "rms_norm_cols";
  act_type(op, "x", x);
  float_type(op, "w", w);
  activate();
  flush();  // launched directly (not a recorded Launch): after what is recorded before it
  cuda::launch_rms_norm_cols(dt(x), x.data(), x.dim(0), x.dim(1), col_begin, groups, width, w.data(), dt(w), eps,
                             sum_sq ? sum_sq->ptr<float>() : nullptr, count, stream_);
}

// A cache the kernels hold (supports_cache); the op checks have matched it with qkv or round_kv.
static void cache_type(const char* op, const Tensor& qkv, DType t) {
  need(t == DType::f32 || t == DType::bf16 || t == DType::f16 || t == DType::f8_e4m3, op,
       str("a KV cache in ", dtype_name(t), " beside ", dtype_name(qkv.dtype()),
           " activations: the cuda backend keeps it in f32, bf16, f16 or f8_e4m3"));
}

void CudaBackend::kv_write_op(const Tensor& qkv, const AttentionDims& dims, const Tensor& slots,
                           Tensor& cache_k, Tensor& cache_v) {
  const char* op = "kv_write";
  need(dims.head_dim <= 576, op, str("head_dim ", dims.head_dim, " is not supported (1 … 576)"));
  act_type(op, "qkv", qkv);
  cache_type(op, qkv, cache_k.dtype());
  activate();
  submit(launch::KvWrite{qkv.data(), slots.ptr<int32_t>(), cache_k.data(), cache_v.data(), qkv.dim(0),
                         geom(dims, cache_k.dim(0), dt(cache_k)), dt(qkv), 0});
}

void CudaBackend::attention_packed_op(const Tensor& qkv, const AttentionDims& dims,
                                   const Tensor& run_start, Tensor& out) {
  const char* op = "attention_packed";
  need(dims.head_dim <= 576, op, str("head_dim ", dims.head_dim, " is not supported (1 … 576)"));
  act_type(op, "qkv", qkv);
  if (dims.round_kv) cache_type(op, qkv, *dims.round_kv);
  activate();
  submit(launch::AttentionPacked{qkv.data(), run_start.ptr<int32_t>(), out.data(), qkv.dim(0),
                                 geom(dims, 0, dims.round_kv ? static_cast<int>(*dims.round_kv) : -1), dt(qkv), 0});
}

void CudaBackend::attention_cache_op(const Tensor& qkv, const AttentionDims& dims, const Tensor& rows,
                                  const Tensor& positions, const Tensor& table,
                                  const Tensor& cache_k, const Tensor& cache_v, Tensor& out) {
  const char* op = "attention_cache";
  need(dims.head_dim <= 576, op, str("head_dim ", dims.head_dim, " is not supported (1 … 576)"));
  act_type(op, "qkv", qkv);
  cache_type(op, qkv, cache_k.dtype());
  const int64_t N = qkv.dim(0);
  activate();
  if (N == 0) return;
  const cuda::AttnGeom g = geom(dims, cache_k.dim(0), dt(cache_k));
  // The splits cover the positions this call reaches (dims.span: its longest position + 1),
  // else every position the table reaches (0 … Pages·page_size − 1): at batch 1, context 8K
  // and MaxSeq 131072, splits sized by MaxSeq would leave all but a few blocks idle.
  const int64_t span = dims.span > 0 ? dims.span : std::max(dims.max_seq, table.dim(1) * dims.page_size);
  const int splits = cuda::attention_cache_splits(span, options_.cache_split);
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
    submit(launch::AttentionCache{q + n0 * q_row, rows.ptr<int32_t>() + n0, positions.ptr<int32_t>() + n0,
                                  table.ptr<int32_t>(), cache_k.data(), cache_v.data(), o + n0 * o_row, ws.ptr<float>(),
                                  std::min(chunk, N - n0), table.dim(0), table.dim(1), g, dt(qkv), splits,
                                  options_.attention_prefetch, options_.cache_split});
  }
}

void CudaBackend::gather_rows_op(const Tensor& src, const Tensor& index, Tensor& out) {
  activate();
  const int64_t row_bytes = src.dim(0) ? static_cast<int64_t>(src.nbytes()) / src.dim(0)
                                       : (out.dim(0) ? static_cast<int64_t>(out.nbytes()) / out.dim(0) : 0);
  submit(launch::GatherRows{src.data(), index.ptr<int32_t>(), out.data(), src.dim(0), out.dim(0), row_bytes});
}

// ---- mixtures of experts (kernels in moe.cu; each launched directly, after what is recorded) ----

void CudaBackend::router_softmax_op(const Tensor& logits, Tensor& probs) {
  const char* op = "router_softmax";
  float_type(op, "logits", logits);
  activate();
  flush();
  cuda::launch_router_softmax(logits.data(), dt(logits), probs.ptr<float>(), logits.dim(0), logits.dim(1), stream_);
}

void CudaBackend::top_k_op(const Tensor& probs, int64_t k, bool normalize, Tensor& weights, Tensor& experts) {
  const int64_t n = probs.dim(0), e = probs.dim(1);
  activate();
  flush();
  cuda::launch_top_k(probs.ptr<float>(), n, e, k, normalize, weights.ptr<float>(), experts.ptr<int32_t>(), stream_);
}

void CudaBackend::choose_experts_op(const Tensor& logits, const Tensor* bias, const ExpertChoice& rule, int64_t k,
                                   Tensor& weights, Tensor& experts) {
  activate();
  flush();
  cuda::launch_choose_experts(logits.ptr<float>(), bias ? bias->ptr<float>() : nullptr, rule, logits.dim(0),
                              logits.dim(1), k, weights.ptr<float>(), experts.ptr<int32_t>(), stream_);
}

void CudaBackend::grouped_matmul_op(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets, Tensor& out) {
  const char* op = "grouped_matmul";
  float_type(op, "x", x);
  const bool quant = quantized(w);
  if (!quant) float_type(op, "w", w);
  float_type(op, "out", out);
  const int64_t groups = static_cast<int64_t>(offsets.size()) - 1, M = x.dim(0), K = x.dim(1), O = out.dim(1);
  int64_t row0 = 0;
  const cuda::QuantWeights q = quant ? quant_weights(w, row0) : cuda::QuantWeights{};
  // A row of the matrix's bytes: its span (4-bit formats half a byte a value), or the dtype's.
  const int64_t row_bytes = quant ? static_cast<int64_t>(Tensor(w.storage(), 0, {1, K}, w.dtype()).span_bytes())
                                  : K * static_cast<int64_t>(dtype_size(w.dtype()));
  activate();
  flush();
  const int tile = cuda::grouped_matmul_rows_per_tile();
  for (int64_t g0 = 0; g0 < groups; g0 += cuda::GroupTiles::kMax) {
    cuda::GroupTiles t;
    t.first_group = static_cast<int>(g0);
    t.groups = static_cast<int>(std::min<int64_t>(cuda::GroupTiles::kMax, groups - g0));
    int tiles = 0;
    for (int g = 0; g <= t.groups; ++g) {
      t.offsets[g] = offsets[static_cast<size_t>(g0 + g)];
      t.first_tile[g] = tiles;
      if (g < t.groups) {
        const int64_t rows = offsets[static_cast<size_t>(g0 + g + 1)] - offsets[static_cast<size_t>(g0 + g)];
        need(rows >= 0, op, str("offsets decrease at group ", g0 + g));
        tiles += static_cast<int>((rows + tile - 1) / tile);
        if (rows > 0) grouped_weight_bytes_ += O * row_bytes;
      }
    }
    if (quant)
      cuda::launch_grouped_matmul_quantized(x.data(), dt(x), q, row0, out.data(), dt(out), K, O, t, tiles, stream_);
    else
      cuda::launch_grouped_matmul(x.data(), dt(x), w.data(), dt(w), out.data(), dt(out), K, O, t, tiles, stream_);
  }
}

void CudaBackend::moe_combine_op(const Tensor& y, const Tensor& rows, const Tensor& experts, const Tensor& weights,
                              Tensor& out) {
  const char* op = "moe_combine";
  act_type(op, "y", y);
  act_type(op, "out", out);
  const int64_t n = out.dim(0), h = out.dim(1), k = n > 0 ? rows.numel() / n : 0;
  activate();
  flush();
  cuda::launch_moe_combine(y.data(), dt(y), rows.ptr<int32_t>(), experts.ptr<int32_t>(), weights.ptr<float>(),
                           out.data(), dt(out), n, h, k, stream_);
}

void CudaBackend::copy_heads_op(const Tensor& src, Tensor& dst, const HeadCopy& c) {
  activate();
  const int64_t tokens = c.tokens(src.dim(0));
  if (tokens == 0 || c.heads == 0 || c.width == 0) return;
  submit(launch::CopyHeads{src.data(), dst.data(), src.dim(1), dst.dim(1), tokens,
                           static_cast<int64_t>(dtype_size(src.dtype())), c.src_begin, c.src_stride, c.step,
                           c.dst_begin, c.dst_stride, c.heads, c.width, c.src_blocks ? 1 : 0, c.dst_blocks ? 1 : 0});
}

void CudaBackend::copy_columns_op(const Tensor& src, Tensor& dst, int64_t col_begin, int64_t cols) {
  activate();
  const int64_t R = src.dim(0);
  if (R == 0 || cols == 0) return;
  if (src.dtype() == dst.dtype()) {
    const int64_t es = static_cast<int64_t>(dtype_size(src.dtype()));
    submit(launch::Copy2D{static_cast<char*>(dst.data()) + col_begin * es, src.data(), dst.dim(1) * es,
                          src.dim(1) * es, cols * es, R});
  } else {
    submit(launch::CopyColumns{src.data(), dst.data(), src.dim(1), dst.dim(1), R, col_begin, cols, dt(src), dt(dst)});
  }
}

namespace {
}  // namespace

void CudaBackend::logit_stats_op(const Tensor& logits, int64_t valid, int64_t vocab_offset,
                              const Tensor& targets, Tensor& max, Tensor& sumexp,
                              Tensor& target_logit) {
  const char* op = "logit_stats";
  float_type(op, "logits", logits);
  const int64_t N = logits.dim(0);
  activate();
  Tensor ws;
  const bool split = options_.split_rows && N > 0;
  if (split) ws = empty({cuda::row_workspace(N, valid)}, DType::f32);
  submit(launch::LogitStats{logits.data(), targets.ptr<int32_t>(), max.ptr<float>(), sumexp.ptr<float>(),
                            target_logit.ptr<float>(), split ? ws.ptr<float>() : nullptr, N, logits.dim(1), valid,
                            vocab_offset, dt(logits), split});
}

void CudaBackend::argmax_op(const Tensor& logits, int64_t valid, int64_t vocab_offset, Tensor& value,
                         Tensor& index) {
  const char* op = "argmax";
  float_type(op, "logits", logits);
  const int64_t N = logits.dim(0);
  activate();
  submit_argmax(logits, valid, vocab_offset, false, 0, 0, 0, 1.f, value, index);
}

void CudaBackend::gumbel_max_op(const Tensor& logits, int64_t valid, int64_t vocab_offset,
                             uint64_t key0, uint64_t key1, int32_t step, float temperature,
                             Tensor& value, Tensor& index) {
  const char* op = "gumbel_max";
  float_type(op, "logits", logits);
  const int64_t N = logits.dim(0);
  activate();
  submit_argmax(logits, valid, vocab_offset, true, key0, key1, step, temperature, value, index);
}

void CudaBackend::submit_argmax(const Tensor& logits, int64_t valid, int64_t vocab_offset, bool gumbel, uint64_t key0,
                                uint64_t key1, int32_t step, float temperature, Tensor& value, Tensor& index) {
  // A Gumbel draw carries its step and key as launch arguments, new every step: recorded with
  // the step's forward pass, no sequence would ever repeat (sampling would never replay a
  // graph). The forward pass goes out first, as its own stable sequence.
  if (gumbel && options_.graphs) flush();
  const int64_t N = logits.dim(0);
  Tensor ws;
  const bool split = options_.split_rows && N > 0;
  if (split) ws = empty({cuda::row_workspace(N, valid)}, DType::f32);
  submit(launch::Argmax{logits.data(), value.ptr<float>(), index.ptr<int32_t>(), split ? ws.ptr<float>() : nullptr, N,
                        logits.dim(1), valid, vocab_offset, key0, key1, dt(logits), gumbel, step, temperature, split,
                        0});
}

// ---- the ops of core/backend_op_list.h: the shared checks, then each op's own ---------------
#define LINNET_ARGS(...) __VA_ARGS__
#define LINNET_OP(name, label, params, args)      \
  void CudaBackend::name params {                  \
    check_args(label, #args, LINNET_ARGS args);    \
    op_checks::name("cuda", LINNET_ARGS args);     \
    name##_op args;                                \
  }
#include "core/backend_op_list.h"
#undef LINNET_OP
#undef LINNET_ARGS

// ---- launching a record (core/cuda/launch_records.cuh) ---------------------------------------
namespace launch {
void Memcpy::run(cudaStream_t s) const {
  LINNET_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, s));
}
void Memset::run(cudaStream_t s) const { LINNET_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), s)); }
void Convert::run(cudaStream_t s) const { launch_convert(src, src_dt, dst, dst_dt, n, s); }
void Embedding::run(cudaStream_t s) const {
  launch_embedding(weight, weight_dt, vocab, ids, out, out_dt, rows, width, s);
}
void MatmulTc::run(cudaStream_t s) const {
  TcChoice c;
  c.tc4 = tc4 != 0;
  c.panel = panel != 0;
  launch_matmul_tc(x, x_dt, w, bias, bias_dt, out, out_dt, n, in, outs, c, workspace, s);
}
void MatmulSimt::run(cudaStream_t s) const {
  launch_matmul(x, x_dt, w, w_dt, bias, bias_dt, out, out_dt, n, in, outs, s);
}
void MatmulQuantized::run(cudaStream_t s) const {
  if (tc)
    launch_matmul_quantized_tc(x, x_dt, w, row0, bias, bias_dt, out, out_dt, n, in, outs, tc == 1, workspace, s);
  else
    launch_matmul_quantized(x, x_dt, w, row0, bias, bias_dt, out, out_dt, n, in, outs, s);
}
void RmsNorm::run(cudaStream_t s) const { launch_rms_norm(act_dt, x, delta, w, w_dt, eps, out, rows, width, s); }
void Add::run(cudaStream_t s) const { launch_add(dt, x, y, n, s); }
void Rope::run(cudaStream_t s) const {
  launch_rope(dt, x, rows, width, head_begin, heads, head_dim, half, positions, inv_freq, inv_freq_dt, per_token != 0,
              scale, s);
}
void Swiglu::run(cudaStream_t s) const { launch_swiglu(dt, gate_up, out, rows, inner, s); }
void KvWrite::run(cudaStream_t s) const { launch_kv_write(dt, qkv, rows, geom, slots, cache_k, cache_v, s); }
void AttentionPacked::run(cudaStream_t s) const { launch_attention_packed(dt, qkv, rows, geom, run_start, out, s); }
void AttentionCache::run(cudaStream_t s) const {
  launch_attention_cache(dt, qkv, n, geom, rows, positions, table, table_rows, table_pages, cache_k, cache_v, out,
                         workspace, splits, prefetch != 0, split_base, s);
}
void GatherRows::run(cudaStream_t s) const { launch_gather_rows(src, src_rows, index, out, out_rows, row_bytes, s); }
void Copy2D::run(cudaStream_t s) const {
  LINNET_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_pitch), src, static_cast<size_t>(src_pitch),
                                      static_cast<size_t>(width), static_cast<size_t>(rows), cudaMemcpyDeviceToDevice,
                                      s));
}
void CopyHeads::run(cudaStream_t s) const {
  launch_copy_heads(src, src_w, dst, dst_w, tokens, elem_bytes, src_begin, src_stride, step, dst_begin, dst_stride,
                    heads, width, src_blocks != 0, dst_blocks != 0, s);
}
void CopyColumns::run(cudaStream_t s) const {
  launch_copy_columns(src, src_dt, src_w, dst, dst_dt, dst_w, rows, col_begin, cols, s);
}
void LogitStats::run(cudaStream_t s) const {
  launch_logit_stats(logits, dt, rows, width, valid, vocab_offset, targets, max, sumexp, target_logit, split_rows != 0,
                     workspace, s);
}
void Argmax::run(cudaStream_t s) const {
  launch_argmax(logits, dt, rows, width, valid, vocab_offset, gumbel != 0, key0, key1, step, temperature, value, index,
                split_rows != 0, workspace, s);
}
}  // namespace launch

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
