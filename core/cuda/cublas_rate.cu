// cuBLAS's matrix rate, as the ceiling `linnet bench` measures prefill against on a GPU: a
// library tuned to the chip, independent of linnet's own (batch-invariant) kernels, as
// OpenBLAS's sgemm is on the CPU. cuBLAS is opened with dlopen only here, for the bench: the
// module links no cuBLAS, and a machine without it loses this one figure, nothing else.
#include <cublas_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <vector>

#include "core/cuda/cuda_backend.cuh"
#include "core/cuda/cuda_common.cuh"

namespace linnet::cuda {
namespace {

using Create = cublasStatus_t (*)(cublasHandle_t*);
using Destroy = cublasStatus_t (*)(cublasHandle_t);
using SetStream = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

}  // namespace

double CudaBackend::library_matmul_rate(DType dt, std::string* source) {
  flush();  // its products go on the stream directly
  void* lib = nullptr;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
  if (!lib) {
    if (source) *source = str("no cuBLAS (", dlerror(), ")");
    return 0;
  }
  auto create = reinterpret_cast<Create>(dlsym(lib, "cublasCreate_v2"));
  auto destroy = reinterpret_cast<Destroy>(dlsym(lib, "cublasDestroy_v2"));
  auto set_stream = reinterpret_cast<SetStream>(dlsym(lib, "cublasSetStream_v2"));
  auto gemm = reinterpret_cast<GemmEx>(dlsym(lib, "cublasGemmEx"));
  cublasHandle_t h = nullptr;
  if (!create || !destroy || !set_stream || !gemm || create(&h) != CUBLAS_STATUS_SUCCESS) {
    if (source) *source = "cuBLAS found but not usable";
    return 0;
  }
  activate();
  set_stream(h, stream_);
  const cudaDataType t = dt == DType::bf16 ? CUDA_R_16BF : dt == DType::f16 ? CUDA_R_16F : CUDA_R_32F;
  const int n = 8192;
  Tensor a = empty({n, n}, dt), c = empty({n, n}, dt);
  fill_zero(a);
  const float one = 1.f, zero = 0.f;
  // c = a · aᵀ, as the backend's own product is timed; f32 accumulation (tensor cores for
  // 16-bit inputs, TF32 not allowed for f32: CUBLAS_COMPUTE_32F).
  auto run = [&] {
    return gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a.data(), t, n, a.data(), t, n, &zero, c.data(), t, n,
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  bool ok = run() == CUBLAS_STATUS_SUCCESS && run() == CUBLAS_STATUS_SUCCESS;
  std::vector<double> times;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  LINNET_CUDA_CHECK(cudaEventCreate(&e0));
  LINNET_CUDA_CHECK(cudaEventCreate(&e1));
  for (int r = 0; ok && r < 5; ++r) {
    LINNET_CUDA_CHECK(cudaEventRecord(e0, stream_));
    ok = run() == CUBLAS_STATUS_SUCCESS;
    LINNET_CUDA_CHECK(cudaEventRecord(e1, stream_));
    LINNET_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    LINNET_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    times.push_back(ms / 1e3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  destroy(h);  // the library stays loaded: cuBLAS keeps state past its handle
  if (!ok || times.empty()) {
    if (source) *source = "cuBLAS's cublasGemmEx failed";
    return 0;
  }
  std::sort(times.begin(), times.end());
  if (source) *source = "cuBLAS";
  return 2.0 * n * n * static_cast<double>(n) / times[times.size() / 2];
}

}  // namespace linnet::cuda
