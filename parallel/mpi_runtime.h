// MPI setup for the launcher (docs/entries.md "Ranks", docs/parallel.md).
//
//   MpiRuntime mpi;                    // MPI_Init_thread unless MPI is already initialised
//   Groups g = mpi.make_groups(tp);    // world/tp replicas of tp shards
//   MpiCommunicator comm(g.shard_comm, &backend);
//   ... Model(config, generics, weights, backend, comm) ...
//
// A plain `linnet …` without mpirun works too: OpenMPI's singleton init gives a world of one.
//
// Failure handling: library code throws linnet::Error. When an error may be seen by one rank
// alone (a file missing on one node, a bad input only rank 0 reads), the others may already be
// waiting in a collective; the launcher then calls abort_all(), which ends the whole job. When
// every rank is known to see the error (all_ok() agreed, or the check depends only on
// arguments every rank has), throwing and leaving MpiRuntime's scope finalises cleanly.
// So the MpiRuntime must outlive the try whose catch calls abort_all:
//
//   MpiRuntime mpi;                                  // outside the try
//   try { run(mpi); } catch (const std::exception& e) { abort_all(e.what(), 1); }
//
// Were it destroyed by the unwinding first, its MPI_Finalize would wait for ranks that are
// stuck in a collective (a hang), and abort_all would find MPI finalised already.
#pragma once
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <string>

namespace linnet {

// The communicators of one rank for `--tp K` (world size N, K | N):
//   replica = world_rank / K holds world ranks replica·K … replica·K + K − 1;
//   shard   = world_rank % K is this rank's tensor-parallel shard (its rank in shard_comm).
// shard_comm joins the K shards of this replica (the model's communicator). Between replicas
// only the control channel talks (parallel/control_channel.h, over the world), so there is
// no communicator across them.
// Owns shard_comm (freed on destruction, before MPI_Finalize); movable, not copyable. It
// reports errors as return codes (MPI_ERRORS_RETURN), which MpiCommunicator throws.
// With --pp P (parallel/world_config.h): a replica is P stages of K shards; shard_comm joins a
// stage's K shards, pipe_comm the P ranks of the same shard in the replica's stages (rank there =
// stage), over which hidden states go stage to stage. pipe_comm is MPI_COMM_NULL at P = 1.
struct Groups {
  int tp = 1;
  int pp = 1;
  int replicas = 1;
  int replica = 0;
  int stage = 0;
  int shard = 0;
  MPI_Comm shard_comm = MPI_COMM_NULL;
  MPI_Comm pipe_comm = MPI_COMM_NULL;

  Groups() = default;
  Groups(Groups&& other) noexcept;
  Groups& operator=(Groups&& other) noexcept;
  Groups(const Groups&) = delete;
  Groups& operator=(const Groups&) = delete;
  ~Groups();
};

class MpiRuntime {
 public:
  // Initialises MPI (MPI_THREAD_FUNNELED: only the main thread calls MPI) unless it already
  // is; then MPI_COMM_WORLD returns errors instead of aborting, so they become linnet::Error.
  // Collective over the world (it finds the ranks sharing this node).
  MpiRuntime();
  // Finalises MPI when this object initialised it (and MPI is not finalised yet).
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // This rank's index among the ranks on its node (the GPU it uses), and their number:
  // OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID (MPICH/Hydra), SLURM_LOCALID (srun, when
  // SLURM_PROCID is this world rank), else the rank in MPI_Comm_split_type(SHARED).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // `--tp K` (K = 0: the whole world). Throws linnet::Error, on every rank alike, when K does
  // not divide the world size or is negative; no collective is needed to agree on that.
  // Collective over the world otherwise (MPI_Comm_split).
  Groups make_groups(int tp, int pp = 1) const;

  // Whether this process was started by an MPI launcher (mpirun, mpiexec, srun with PMI/PMIx).
  static bool launched_by_mpi();

 private:
  bool owns_ = false;
  int world_rank_ = 0, world_size_ = 1;
  int local_rank_ = 0, local_size_ = 1;
};

// Prints "linnet rank R: message" to stderr and ends every rank of the job with MPI_Abort
// (exit status `code`, 1 if code is 0). The one place linnet ends a process itself: for a
// failure one rank alone sees, where the others might wait forever in a collective. Without
// MPI initialised (or after MPI_Finalize) it calls std::_Exit(code) instead.
// After an error: whether every rank of the world reaches this point within `seconds`
// (a non-blocking barrier, polled). When all ranks failed alike (they validate the same
// inputs identically) each can then report and exit cleanly; otherwise call abort_all.
bool all_ranks_arrive(double seconds);

[[noreturn]] void abort_all(const std::string& message, int code = 1);

}  // namespace linnet
