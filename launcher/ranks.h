// The launcher's view of the ranks: under mpirun (or srun) the world is split into replicas of --tp
// shards (docs/entries.md "Ranks"); alone, one rank is one shard. It owns the backend (GPU
// local_rank on CUDA; OpenMP threads shared among a node's ranks), the shard group's communicator
// and the job's control channel (parallel/control_channel.h). MPI itself stays in parallel/.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "parallel/communicator.h"
#include "parallel/control_channel.h"

namespace linnet::cli {

// The job's ranks: the MPI world's size under mpirun or srun, else 1.
int job_world_size();

class Ranks {
 public:
  // threads > 0: OpenMP threads per rank (else each rank takes its share of the node's cores).
  // pp > 1: each replica is pp pipeline stages of tp shards (parallel/world_config.h).
  Ranks(int tp, const std::string& backend_kind, int threads = 0, int pp = 1);
  ~Ranks();

  Backend& backend() { return *backend_; }
  Communicator& shards() { return *shards_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int replica() const { return replica_; }
  int replicas() const { return replicas_; }
  // Pipeline stages: this rank's stage and their number, and the communicator of its shard's
  // stages (rank = stage; null with one stage).
  int stage() const { return stage_; }
  int stages() const { return stages_; }
  Communicator* pipe() { return pipe_.get(); }
  // Whether this rank leads its replica (shard 0 of stage 0): it writes the replica's results.
  bool leads_replica() { return shards_->rank() == 0 && stage_ == 0; }
  // The control channel over the world (nothing to do without MPI).
  void world_barrier() { control_->barrier(); }
  void world_broadcast(std::string& text) { control_->broadcast(text); }
  std::vector<std::string> world_gather(const std::string& text) { return control_->gather(text); }
  ControlChannel& world() { return *control_; }
  // How many ranks of this size share this rank's memory: the node's RAM on the CPU, one GPU
  // when ranks outnumber the node's GPUs.
  int sharing_memory() const;

 private:
  struct Mpi;
  void log_blas_choice() const;
  std::unique_ptr<Mpi> mpi_;
  int world_rank_ = 0, world_size_ = 1, replica_ = 0, replicas_ = 1, local_size_ = 1, stage_ = 0, stages_ = 1;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> shards_;
  std::unique_ptr<Communicator> pipe_;
  std::unique_ptr<ControlChannel> control_;
};

}  // namespace linnet::cli
