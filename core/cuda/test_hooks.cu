// What tests plant on a GPU and cannot make through the backend's ops: a stream held busy
// for a while (a collective queued behind it stays unfinished: the NCCL watchdog's deadline,
// tests/mpi_comm_check.cpp --nccl-one-rank). Exported from the module as
// linnet_cuda_test_spin(stream, seconds).
#include "core/cuda/cuda_common.cuh"
#include "core/cuda/kernels.cuh"

namespace linnet::cuda {
namespace {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(unsigned long long ns) {
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < ns) __nanosleep(100000);
}

}  // namespace

void launch_spin(double seconds, cudaStream_t s) {
  spin_kernel<<<1, 1, 0, s>>>(static_cast<unsigned long long>(seconds > 0 ? seconds * 1e9 : 0));
  LINNET_CUDA_LAUNCH_CHECK();
}

}  // namespace linnet::cuda

extern "C" void linnet_cuda_test_spin(void* stream, double seconds) {
  linnet::cuda::launch_spin(seconds, static_cast<cudaStream_t>(stream));
}
