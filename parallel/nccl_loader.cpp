// make_nccl_communicator: the NCCL communicator lives in the CUDA module with the backend.
#include "core/cuda_module.h"
#include "parallel/nccl_communicator.h"

namespace linnet {

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int cuda_device, void* stream, Backend* backend) {
  using Make = Communicator* (*)(MPI_Comm, int, void*, Backend*);
  auto make = reinterpret_cast<Make>(cuda_module_symbol("linnet_cuda_make_nccl_communicator"));
  if (!make)
    throw Error(cuda_module_error().empty() ? "the CUDA module was built without NCCL"
                                            : str("NCCL: ", cuda_module_error()));
  return std::unique_ptr<Communicator>(make(comm, cuda_device, stream, backend));
}

}  // namespace linnet
