// Random weights made on the device (Backend::random_normal): core/random_normal.h's values,
// rounded once to the tensor's dtype. Llama-3-8B's 8 billion weights take a few milliseconds
// of the GPU here, where the host made them in f32 and uploaded 16 GB.
#include "core/cuda/cuda_common.cuh"
#include "core/cuda/kernels.cuh"
#include "core/random_normal.h"

namespace linnet::cuda {
namespace {

template <class T>
__global__ void random_normal_kernel(T* __restrict__ out, int64_t rows, int64_t cols, uint64_t key, int64_t base,
                                     int64_t stride, float mean, float scale) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const uint64_t index = static_cast<uint64_t>(base + r * stride + c);
    out[i] = from_f<T>(random_normal::value(key, index, mean, scale));
  }
}

}  // namespace

void launch_random_normal(void* out, int dt, int64_t rows, int64_t cols, uint64_t key, int64_t base, int64_t stride,
                          float mean, float scale, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  const unsigned blocks = blocks_for(rows * cols, 256);
  switch (dt) {
    case kBF16:
      random_normal_kernel<<<blocks, 256, 0, s>>>(static_cast<__nv_bfloat16*>(out), rows, cols, key, base, stride, mean,
                                                   scale);
      break;
    case kF16:
      random_normal_kernel<<<blocks, 256, 0, s>>>(static_cast<__half*>(out), rows, cols, key, base, stride, mean, scale);
      break;
    case kF32:
      random_normal_kernel<<<blocks, 256, 0, s>>>(static_cast<float*>(out), rows, cols, key, base, stride, mean, scale);
      break;
    default:
      throw Error(str("cuda random_normal: unsupported dtype ", dtype_name(static_cast<DType>(dt))));
  }
  LINNET_CUDA_LAUNCH_CHECK();
}

}  // namespace linnet::cuda
