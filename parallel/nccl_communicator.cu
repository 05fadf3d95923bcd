// NcclCommunicator (see nccl_communicator.h). No spdlog/fmt here: nvcc compiles this file.
#if defined(LINNET_HAVE_NCCL) && defined(LINNET_HAVE_MPI)
#include <cuda_runtime.h>
#include <nccl.h>

#include "parallel/nccl_communicator.h"

namespace linnet {
namespace {

[[noreturn]] void nccl_error(ncclResult_t r, const char* call, const char* file, int line) {
  throw Error(str(file, ":", line, ": ", call, " failed: ", ncclGetErrorString(r)));
}
[[noreturn]] void cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  throw Error(str(file, ":", line, ": ", call, " failed: ", cudaGetErrorString(e)));
}

#define NCCL_COMM_CHECK(expr)                                            \
  do {                                                                   \
    const ncclResult_t nccl_r_ = (expr);                                 \
    if (nccl_r_ != ncclSuccess) nccl_error(nccl_r_, #expr, __FILE__, __LINE__); \
  } while (0)
#define CUDA_COMM_CHECK(expr)                                            \
  do {                                                                   \
    const cudaError_t cuda_e_ = (expr);                                  \
    if (cuda_e_ != cudaSuccess) cuda_error(cuda_e_, #expr, __FILE__, __LINE__); \
  } while (0)

ncclDataType_t nccl_type(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
  }
  throw Error(str("nccl: no NCCL type for ", t.describe()));
}

bool on_device(const Tensor& t) { return t.device() == Device::cuda; }

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm, int cuda_device, CUstream_st* stream, Backend* backend)
    : mpi_(comm, backend), device_(cuda_device), stream_(stream) {
  // Rank 0 makes the unique id; it and whether that worked reach every rank, so a failure
  // there throws everywhere instead of leaving the others waiting.
  struct {
    int ok;
    ncclUniqueId id;
  } setup{};
  if (mpi_.rank() == 0) setup.ok = ncclGetUniqueId(&setup.id) == ncclSuccess ? 1 : 0;
  LINNET_MPI_CHECK(MPI_Bcast(&setup, sizeof setup, MPI_BYTE, 0, comm));
  if (!setup.ok) throw Error("nccl: rank 0 could not make a NCCL unique id (ncclGetUniqueId)");

  std::string failure;
  try {
    CUDA_COMM_CHECK(cudaSetDevice(device_));
    NCCL_COMM_CHECK(ncclCommInitRank(&nccl_, mpi_.size(), setup.id, mpi_.rank()));
  } catch (const Error& e) {
    failure = e.what();
  }
  if (!mpi_.all_ok(failure.empty())) {
    if (nccl_) ncclCommDestroy(nccl_);
    nccl_ = nullptr;
    throw Error(failure.empty() ? std::string("nccl: another rank failed to set up NCCL")
                                : str("nccl on GPU ", device_, ": ", failure));
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (nccl_) ncclCommDestroy(nccl_);
}

void NcclCommunicator::all_reduce(Tensor& t, bool sum) {
  if (!on_device(t)) {
    if (sum)
      mpi_.all_reduce_sum(t);
    else
      mpi_.all_reduce_max(t);
    return;
  }
  if (t.numel() == 0) return;
  CUDA_COMM_CHECK(cudaSetDevice(device_));
  NCCL_COMM_CHECK(ncclAllReduce(t.data(), t.data(), static_cast<size_t>(t.numel()), nccl_type(t),
                                sum ? ncclSum : ncclMax, nccl_, stream_));
}

void NcclCommunicator::all_reduce_sum(Tensor& t) { all_reduce(t, true); }
void NcclCommunicator::all_reduce_max(Tensor& t) { all_reduce(t, false); }

void NcclCommunicator::all_gather(const Tensor& local, Tensor& out) {
  if (!on_device(local) || !on_device(out)) {
    mpi_.all_gather(local, out);  // host (or mixed, staged) tensors
    return;
  }
  LINNET_CHECK(local.dtype() == out.dtype() && out.numel() == local.numel() * size(), "nccl all_gather of ",
               local.describe(), " into ", out.describe(), " over ", size(), " ranks");
  if (local.numel() == 0) return;
  CUDA_COMM_CHECK(cudaSetDevice(device_));
  NCCL_COMM_CHECK(ncclAllGather(local.data(), out.data(), local.nbytes(), ncclInt8, nccl_, stream_));
}

void NcclCommunicator::broadcast(Tensor& t, int root) {
  if (!on_device(t)) {
    mpi_.broadcast(t, root);
    return;
  }
  if (root < 0 || root >= size()) throw Error(str("nccl broadcast from root ", root, " of ", size(), " ranks"));
  if (t.numel() == 0) return;
  CUDA_COMM_CHECK(cudaSetDevice(device_));
  NCCL_COMM_CHECK(ncclBroadcast(t.data(), t.data(), t.nbytes(), ncclInt8, root, nccl_, stream_));
}

extern "C" Communicator* linnet_cuda_make_nccl_communicator(MPI_Comm comm, int cuda_device, void* stream,
                                                            Backend* backend) {
  return new NcclCommunicator(comm, cuda_device, static_cast<CUstream_st*>(stream), backend);
}

}  // namespace linnet
#endif
