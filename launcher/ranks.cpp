#include "launcher/ranks.h"

#include <spdlog/spdlog.h>

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "core/cpu/blas_kernels.h"
#include "launcher/world.h"
#ifdef LINNET_HAVE_MPI
#include "parallel/mpi_runtime.h"
#endif

namespace linnet::cli {

struct Ranks::Mpi {
#ifdef LINNET_HAVE_MPI
  Groups groups;
#endif
};

Ranks::Ranks(int tp, const std::string& backend_kind, int threads) {
#ifdef LINNET_HAVE_MPI
  if (const MpiRuntime* rt = mpi_runtime()) {
    world_rank_ = rt->world_rank();
    world_size_ = rt->world_size();
    mpi_ = std::make_unique<Mpi>();
    mpi_->groups = rt->make_groups(tp);  // --tp K not dividing the world: an error on every rank
    replica_ = mpi_->groups.replica;
    replicas_ = mpi_->groups.replicas;
    backend_ = make_backend(backend_kind, rt->local_rank());  // GPU local_rank on CUDA
    local_size_ = rt->local_size();
    if (threads > 0) omp_set_num_threads(threads);
    else share_cores(rt->local_size());
    shards_ = make_shard_communicator(mpi_->groups, *backend_);
    control_ = std::make_unique<ControlChannel>(rt);
    log_blas_choice();
    spdlog::info("backend {} ({} threads), replica {} of {}, shard {} of {} ({} communicator)", backend_->name(),
                 omp_get_max_threads(), replica_,
                 replicas_, shards_->rank(), shards_->size(), shards_->name());
    return;
  }
#endif
  if (tp > 1) throw Error(str("--tp ", tp, " needs ", tp, " ranks, but this run has 1 (start it with mpirun)"));
  backend_ = make_backend(backend_kind, 0);
  if (threads > 0) omp_set_num_threads(threads);
  shards_ = std::make_unique<SingleCommunicator>();
  control_ = std::make_unique<ControlChannel>(nullptr);
  spdlog::info("backend {} ({} threads), 1 rank", backend_->name(), omp_get_max_threads());
  log_blas_choice();
}

Ranks::~Ranks() = default;

void Ranks::log_blas_choice() const {
  if (backend_->device() != Device::cpu) return;
  if (const char* was = std::getenv("LINNET_BLAS_CHOSEN"))
    spdlog::info("OpenBLAS kernels: {} (it had chosen {} for this CPU; OPENBLAS_CORETYPE overrides)", blas_coretype(), was);
  else
    spdlog::debug("OpenBLAS kernels: {}", blas_coretype());
}

// Ranks on one node share its cores: unless OMP_NUM_THREADS says otherwise, each takes its
// share (OpenMP threads that outnumber cores spin against each other). A rank bound to
// fewer cores (mpirun's default --bind-to core) keeps what it was given.
void Ranks::share_cores(int local_ranks) {
  if (std::getenv("OMP_NUM_THREADS") || local_ranks <= 1) return;
  cpu_set_t set;
  const int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  omp_set_num_threads(std::max(1, std::min(allowed, all / local_ranks)));
}

int Ranks::sharing_memory() const {
  if (backend_->device() == Device::cpu) return local_size_;
  const int gpus = std::max(1, cuda_device_count());
  return (local_size_ + gpus - 1) / gpus;
}

}  // namespace linnet::cli
