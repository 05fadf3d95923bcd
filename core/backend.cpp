#include "core/backend.h"

#include "core/error.h"

#include "core/cuda_module.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <string>

namespace linnet {

Tensor BackendDevice::upload_matrix(const std::vector<Tensor>& parts) { return upload_matrix(stack_rows(parts)); }

Tensor BackendDevice::upload_quantized_matrix(const std::vector<QuantizedPart>&, const WeightLayout& layout) {
  throw Error(str("the ", name(), " backend has no kernels for ", weight_format_name(layout.format), " weights"));
}

namespace {
// The first number in a file (memory.max holds "max" when there is no limit).
int64_t read_number(const std::string& path, int64_t fallback) {
  std::ifstream in(path);
  long long v = 0;
  return in >> v ? static_cast<int64_t>(v) : fallback;
}
}  // namespace

int64_t host_memory_available() {
  int64_t avail = std::numeric_limits<int64_t>::max();
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  long long kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") avail = static_cast<int64_t>(kib) * 1024;
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  const int64_t limit = read_number("/sys/fs/cgroup/memory.max", -1);
  if (limit > 0) avail = std::min(avail, limit - read_number("/sys/fs/cgroup/memory.current", 0));
  return std::max<int64_t>(avail, 0);
}

namespace {
class HostTimer final : public DeviceTimer {
 public:
  void start() override { t0_ = std::chrono::steady_clock::now(); }
  void stop() override { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  double seconds() override { return total_; }
  void reset() override { total_ = 0; }

 private:
  std::chrono::steady_clock::time_point t0_;
  double total_ = 0;
};
}  // namespace

std::unique_ptr<DeviceTimer> BackendDevice::make_timer() { return std::make_unique<HostTimer>(); }

// ---- the CUDA backend, from its module (core/cuda_module.h) --------------------------------

namespace {
struct CudaProbe {
  int devices = 0;
  std::string why;  // why there is none
};
const CudaProbe& cuda_probe() {
  static const CudaProbe p = [] {
    CudaProbe r;
    using Count = int (*)(std::string*);
    auto count = reinterpret_cast<Count>(cuda_module_symbol("linnet_cuda_device_count"));
    if (!count) {
      r.why = cuda_module_error().empty() ? "the CUDA module has no linnet_cuda_device_count" : cuda_module_error();
      return r;
    }
    r.devices = count(&r.why);
    if (r.devices == 0 && r.why.empty()) r.why = "the CUDA runtime reports no device";
    return r;
  }();
  return p;
}
}  // namespace

int cuda_device_count() { return cuda_probe().devices; }
const std::string& cuda_status() { return cuda_probe().why; }

std::string cuda_device_description(int device) {
  using Describe = void (*)(int, std::string*);
  auto describe = reinterpret_cast<Describe>(cuda_module_symbol("linnet_cuda_describe"));
  std::string out;
  if (describe && device >= 0 && device < cuda_device_count()) describe(device, &out);
  return out;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  const int n = cuda_device_count();
  if (n == 0) throw Error(str("cuda backend: no CUDA device is usable: ", cuda_status()));
  if (device < 0 || device >= n)
    throw Error(str("cuda backend: device ", device, " is not among the ", n, " visible CUDA devices"));
  using Make = Backend* (*)(int);
  auto make = reinterpret_cast<Make>(cuda_module_symbol("linnet_cuda_make_backend"));
  return std::unique_ptr<Backend>(make(device));
}

DType backend_compute_dtype(const std::string& kind, DType weights) {
  if (kind == "cpu" || (kind == "auto" && cuda_device_count() == 0)) return DType::f32;  // widened at load
  if (kind == "cuda" || kind == "auto") return weights == DType::f16 || weights == DType::bf16 ? weights : DType::f32;
  throw Error(str("unknown backend '", kind, "' (expected cpu, cuda or auto)"));
}

DType backend_weight_dtype(const std::string& kind, DType t) {
  if (kind == "cpu" || (kind == "auto" && cuda_device_count() == 0)) return is_float(t) ? t : DType::f32;
  return backend_compute_dtype(kind, t);
}

std::unique_ptr<Backend> make_backend(const std::string& kind, int local_rank) {
  if (kind == "cpu") return make_cpu_backend();
  if (kind == "cuda") {
    const int n = cuda_device_count();
    if (n == 0) throw Error(str("--backend cuda: no CUDA device is usable: ", cuda_status()));
    return make_cuda_backend(local_rank % n);
  }
  if (kind == "auto") {
    const int n = cuda_device_count();
    return n > 0 ? make_cuda_backend(local_rank % n) : make_cpu_backend();
  }
  throw Error(str("unknown backend '", kind, "' (expected cpu, cuda or auto)"));
}

}  // namespace linnet
