#include "launcher/ranks.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

#include "core/cpu/blas_kernels.h"
#include "core/cpu/cpu_threads.h"
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

int job_world_size() {
#ifdef LINNET_HAVE_MPI
  if (const MpiRuntime* rt = mpi_runtime()) return rt->world_size();
#endif
  return 1;
}

Ranks::Ranks(int tp, const std::string& backend_kind, int threads, int pp) {
#ifdef LINNET_HAVE_MPI
  if (const MpiRuntime* rt = mpi_runtime()) {
    world_rank_ = rt->world_rank();
    world_size_ = rt->world_size();
    mpi_ = std::make_unique<Mpi>();
    mpi_->groups = rt->make_groups(tp, pp);  // --tp K not dividing the world: an error on every rank
    replica_ = mpi_->groups.replica;
    replicas_ = mpi_->groups.replicas;
    stage_ = mpi_->groups.stage;
    stages_ = mpi_->groups.pp;
    backend_ = make_backend(backend_kind, rt->local_rank());  // GPU local_rank on CUDA
    local_size_ = rt->local_size();
    const CpuThreads cpu = set_cpu_threads(threads, local_size_);
    shards_ = make_shard_communicator(mpi_->groups, *backend_);
    pipe_ = make_pipe_communicator(mpi_->groups, *backend_);
    control_ = std::make_unique<ControlChannel>(rt);
    log_blas_choice();
    spdlog::info("backend {} ({} threads: {}), replica {} of {}, {}shard {} of {} ({} communicator)", backend_->name(),
                 cpu.threads, cpu.why, replica_, replicas_,
                 stages_ > 1 ? str("stage ", stage_, " of ", stages_, " (", pipe_->name(), " between stages), ") : "",
                 shards_->rank(), shards_->size(), shards_->name());
    return;
  }
#endif
  if (tp > 1) throw Error(str("--tp ", tp, " needs ", tp, " ranks, but this run has 1 (start it with mpirun)"));
  if (pp > 1) throw Error(str("--pp ", pp, " needs ", pp, " ranks, but this run has 1 (start it with mpirun)"));
  backend_ = make_backend(backend_kind, 0);
  const CpuThreads cpu = set_cpu_threads(threads, 1);
  shards_ = std::make_unique<SingleCommunicator>();
  control_ = std::make_unique<ControlChannel>(nullptr);
  spdlog::info("backend {} ({} threads: {}), 1 rank", backend_->name(), cpu.threads, cpu.why);
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

int Ranks::sharing_memory() const {
  if (backend_->device() == Device::cpu) return local_size_;
  const int gpus = std::max(1, cuda_device_count());
  return (local_size_ + gpus - 1) / gpus;
}

}  // namespace linnet::cli
