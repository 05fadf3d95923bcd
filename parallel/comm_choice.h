// Which communicator joins a replica's shards: NCCL when every shard has a GPU of its own,
// MPI otherwise (host tensors; device tensors staged through the host when ranks share a GPU,
// which NCCL refuses). Decided once for the group from every rank's device, gathered — never
// per node from counts, which per-rank CUDA_VISIBLE_DEVICES or unlike nodes make disagree
// (ranks that pick different communicators hang).
#pragma once
#include <string>
#include <vector>

namespace linnet {

enum class ShardComm { mpi, nccl };

// devices: each shard's device in rank order, "cpu" or "cuda:<GPU UUID>". forced: LINNET_COMM
// ("", "mpi" or "nccl"). Throws linnet::Error (the same on every rank) when the shards run
// different backends, or NCCL is forced where it cannot work.
ShardComm choose_shard_comm(const std::vector<std::string>& devices, const std::string& forced);

}  // namespace linnet
