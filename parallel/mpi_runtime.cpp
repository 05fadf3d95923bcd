#include <unistd.h>
#include "parallel/mpi_runtime.h"

#include "parallel/world_config.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "core/error.h"
#include "parallel/mpi_communicator.h"

namespace linnet {

namespace {

bool mpi_active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// A non-negative integer from the environment, or -1.
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 30) return -1;
  return static_cast<int>(x);
}

void free_comm(MPI_Comm& c) {
  if (c != MPI_COMM_NULL && mpi_active()) MPI_Comm_free(&c);
  c = MPI_COMM_NULL;
}

}  // namespace

// ---- Groups ----------------------------------------------------------------------------------

Groups::Groups(Groups&& o) noexcept
    : tp(o.tp), pp(o.pp), replicas(o.replicas), replica(o.replica), stage(o.stage), shard(o.shard),
      shard_comm(o.shard_comm), pipe_comm(o.pipe_comm) {
  o.shard_comm = MPI_COMM_NULL;
  o.pipe_comm = MPI_COMM_NULL;
}

Groups& Groups::operator=(Groups&& o) noexcept {
  if (this != &o) {
    free_comm(shard_comm);
    free_comm(pipe_comm);
    tp = o.tp;
    pp = o.pp;
    replicas = o.replicas;
    replica = o.replica;
    stage = o.stage;
    shard = o.shard;
    shard_comm = std::exchange(o.shard_comm, MPI_COMM_NULL);
    pipe_comm = std::exchange(o.pipe_comm, MPI_COMM_NULL);
  }
  return *this;
}

Groups::~Groups() {
  free_comm(shard_comm);
  free_comm(pipe_comm);
}

// ---- MpiRuntime ------------------------------------------------------------------------------

bool MpiRuntime::launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

MpiRuntime::MpiRuntime() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) throw Error("MpiRuntime: MPI was already finalised in this process");
  if (!initialized) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) throw Error(str("MPI_Init_thread failed (error ", rc, ")"));
    owns_ = true;
    // FUNNELED is all linnet needs; MPI_THREAD_SINGLE would still work with one calling thread.
  }
  LINNET_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  LINNET_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  LINNET_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));

  // Ranks on this node: always computed (a collective every rank makes), then the launcher's
  // own numbering is preferred where it gives one.
  MPI_Comm node = MPI_COMM_NULL;
  LINNET_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node));
  LINNET_MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  LINNET_MPI_CHECK(MPI_Comm_size(node, &local_size_));
  MPI_Comm_free(&node);
  int env = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
  if (env < 0) env = env_int("MPI_LOCALRANKID");
  if (env < 0 && env_int("SLURM_PROCID") == world_rank_) env = env_int("SLURM_LOCALID");
  if (env >= 0) local_rank_ = env;
}

MpiRuntime::~MpiRuntime() {
  if (owns_ && mpi_active()) MPI_Finalize();
}

Groups MpiRuntime::make_groups(int tp, int pp) const {
  if (pp > 1) {  // replicas × stages × shards (parallel/world_config.h); its rules checked there
    const WorldConfig w = WorldConfig::make(world_size_, tp, pp);
    Groups g;
    g.tp = w.tp;
    g.pp = w.pp;
    g.replicas = w.replicas();
    g.replica = w.replica_of(world_rank_);
    g.stage = w.stage_of(world_rank_);
    g.shard = w.shard_of(world_rank_);
    LINNET_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, g.replica * g.pp + g.stage, g.shard, &g.shard_comm));
    LINNET_MPI_CHECK(MPI_Comm_set_errhandler(g.shard_comm, MPI_ERRORS_RETURN));
    LINNET_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, g.replica * g.tp + g.shard, g.stage, &g.pipe_comm));
    LINNET_MPI_CHECK(MPI_Comm_set_errhandler(g.pipe_comm, MPI_ERRORS_RETURN));
    return g;
  }
  if (tp == 0) tp = world_size_;
  if (tp < 0 || world_size_ % tp != 0)
    throw Error(str("--tp ", tp, " does not divide the world of ", world_size_, " ranks (mpirun -np ", world_size_,
                    "): every model replica needs --tp ranks"));
  Groups g;
  g.tp = tp;
  g.replicas = world_size_ / tp;
  g.replica = world_rank_ / tp;
  g.shard = world_rank_ % tp;
  LINNET_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, g.replica, g.shard, &g.shard_comm));
  LINNET_MPI_CHECK(MPI_Comm_set_errhandler(g.shard_comm, MPI_ERRORS_RETURN));
  return g;
}

bool all_ranks_arrive(double seconds) {
  if (!mpi_active()) return true;
  MPI_Request req;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &req) != MPI_SUCCESS) return false;
  const double until = MPI_Wtime() + seconds;
  int done = 0;
  while (!done && MPI_Wtime() < until) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) usleep(2000);
  }
  return done != 0;  // an unfinished request is left to MPI_Abort
}

[[noreturn]] void abort_all(const std::string& message, int code) {
  if (code == 0) code = 1;
  int rank = -1;
  const bool active = mpi_active();
  if (active) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank >= 0)
    std::fprintf(stderr, "linnet rank %d: %s\n", rank, message.c_str());
  else
    std::fprintf(stderr, "linnet: %s\n", message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  if (active) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this is for a process without MPI
}

}  // namespace linnet
