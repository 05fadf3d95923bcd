#include "core/backend.h"

namespace linnet {

#ifndef LINNET_HAVE_CUDA
int cuda_device_count() { return 0; }
std::unique_ptr<Backend> make_cuda_backend(int) {
  throw Error("this linnet was built without CUDA (configure with LINNET_CUDA=ON on a machine with nvcc)");
}
#endif

std::unique_ptr<Backend> make_backend(const std::string& kind, int local_rank) {
  if (kind == "cpu") return make_cpu_backend();
  if (kind == "cuda") {
    const int n = cuda_device_count();
    if (n == 0) throw Error("--backend cuda: no CUDA device is visible");
    return make_cuda_backend(local_rank % n);
  }
  if (kind == "auto") {
    const int n = cuda_device_count();
    return n > 0 ? make_cuda_backend(local_rank % n) : make_cpu_backend();
  }
  throw Error(str("unknown backend '", kind, "' (expected cpu, cuda or auto)"));
}

}  // namespace linnet
