#include "parallel/comm_choice.h"

#include <map>

#include "core/error.h"

namespace linnet {

ShardComm choose_shard_comm(const std::vector<std::string>& devices, const std::string& forced) {
  if (forced != "" && forced != "mpi" && forced != "nccl")
    throw Error(str("LINNET_COMM='", forced, "': expected mpi or nccl"));
  size_t gpus = 0;
  for (const auto& d : devices) gpus += d.rfind("cuda:", 0) == 0;
  if (gpus != 0 && gpus != devices.size()) {
    size_t cpu = 0, gpu = 0;
    for (size_t r = 0; r < devices.size(); ++r) (devices[r].rfind("cuda:", 0) == 0 ? gpu : cpu) = r;
    throw Error(str("the shards of a replica run different backends (rank ", gpu, ": ", devices[gpu], ", rank ", cpu,
                    ": ", devices[cpu], "): every shard needs a GPU, or pass --backend cpu"));
  }
  if (gpus == 0) {
    if (forced == "nccl") throw Error("LINNET_COMM=nccl needs the CUDA backend");
    return ShardComm::mpi;
  }
  if (forced == "mpi") return ShardComm::mpi;
  std::map<std::string, size_t> first;  // GPU → the first rank on it
  for (size_t r = 0; r < devices.size(); ++r) {
    auto [it, fresh] = first.emplace(devices[r], r);
    if (!fresh) {
      if (forced == "nccl")
        throw Error(str("LINNET_COMM=nccl, but ranks ", it->second, " and ", r, " share GPU ", devices[r],
                        " (NCCL refuses that; leave LINNET_COMM unset to stage through MPI)"));
      return ShardComm::mpi;
    }
  }
  return ShardComm::nccl;
}

}  // namespace linnet
