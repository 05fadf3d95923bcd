// The launcher's view of the ranks: under mpirun (or srun) the world is split into replicas of
// --tp shards (SPEC §7); alone, one rank is one shard. It owns the backend (GPU local_rank on
// CUDA) and the shard group's communicator, reads inputs on a replica's rank 0 and
// broadcasts them, and writes outputs on a replica's rank 0.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "parallel/communicator.h"

namespace linnet {
class MpiRuntime;
}

namespace linnet::cli {

class Ranks {
 public:
  // threads > 0: OpenMP threads per rank (else each rank takes its share of the node's cores).
  Ranks(int tp, const std::string& backend_kind, int threads = 0);
  ~Ranks();

  Backend& backend() { return *backend_; }
  Communicator& shards() { return *shards_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int replica() const { return replica_; }
  int replicas() const { return replicas_; }
  // Every rank of the job waits here (nothing without MPI).
  void world_barrier();
  // Control messages of `linnet serve` over the world (MPI on the host, whatever the shards
  // use). Waiting ranks poll with short sleeps, so an idle server does not spin its cores.
  // world_broadcast: world rank 0's `text` to every rank.
  void world_broadcast(std::string& text);
  // Every rank's text, in world-rank order, on world rank 0 (an empty list elsewhere).
  std::vector<std::string> world_gather(const std::string& text);

  // "{replica}" in a path becomes this rank's replica index.
  std::string replica_path(std::string pattern) const;
  // The --outputs pattern as given, before replica_path (to know whether it names {replica}).
  void set_outputs_pattern(std::string p) { replica_path_template_ = std::move(p); }
  std::map<std::string, Tensor> read_inputs(const std::string& path);
  // Throws on every rank of the replica unless its writer can create `path` (before the
  // model loads: a wrong output path should not cost the run).
  void check_writable(const std::string& path);
  void write_outputs(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& outputs);
  // How many ranks of this size share this rank's memory: the node's RAM on the CPU, one GPU
  // when ranks outnumber the node's GPUs.
  int sharing_memory() const;

 private:
  struct Mpi;
  std::unique_ptr<Communicator> make_shard_communicator(const MpiRuntime& rt);
  void share_cores(int local_ranks);
  void log_blas_choice() const;
  bool writes_outputs(const std::string& path) const;
  std::unique_ptr<Mpi> mpi_;
  void* control_comm_ = nullptr;  // MPI_Comm (a duplicate of the world), made at first use
  int world_rank_ = 0, world_size_ = 1, replica_ = 0, replicas_ = 1, local_size_ = 1;
  std::string replica_path_template_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> shards_;
};

}  // namespace linnet::cli
