// MpiCommunicator: the Communicator over an MPI communicator (docs/entries.md "Ranks",
// docs/parallel.md).
//
// - Host tensors are reduced in place with MPI_Allreduce (MPI_IN_PLACE); gathers and
//   broadcasts move raw bytes, so any dtype works there.
// - Sums and maxima: f32, i32 and i64 directly; bf16 and f16 are widened to f32, reduced, and
//   rounded back once (round to nearest even). Float sums over 3+ ranks are added in rank
//   order, ((x₀ + x₁) + x₂) + …, by an all-to-all and a gather: MPI_Allreduce's association
//   changes with the message size, and a token's bits must not change with the batch.
// - Device tensors (tensor.device() != cpu) are staged through the host with the Backend given
//   at construction: backend->to_host(t), the host collective, backend->copy_from_host(host, t).
//   This is the path for two ranks sharing one GPU (NCCL refuses that) and for checking; a
//   device tensor without a backend is an Error.
// - Every rank of the communicator must make the same calls in the same order with tensors of
//   the same shape and dtype (the usual MPI rule; it is not checked, to keep one message per call).
// - MPI errors become linnet::Error when the communicator's error handler returns them
//   (MpiRuntime sets MPI_ERRORS_RETURN on the communicators it makes).
//
// The MPI_Comm is borrowed, not owned: it must outlive this object (MpiRuntime's Groups own
// theirs). MPI must be initialised before any call (MpiRuntime does that).
#pragma once
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API only (OpenMPI's deprecated C++ bindings stay out)
#endif
#include <mpi.h>

#include "core/backend.h"
#include "parallel/communicator.h"

namespace linnet {

class MpiCommunicator final : public Communicator {
 public:
  // `backend` stages device tensors; nullptr when every tensor is on the host.
  explicit MpiCommunicator(MPI_Comm comm, Backend* backend = nullptr);
  // Up to this many bytes of everyone's values, float sums over 3+ ranks gather them all (one
  // collective); past it, an all-to-all of chunks and a gather of their sums (a ring's bytes).
  static constexpr int64_t kGatherSumBytes = 64 << 10;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  void all_reduce_sum(Tensor& t) override;
  void all_reduce_max(Tensor& t) override;
  void all_gather(const Tensor& local, Tensor& out) override;
  void broadcast(Tensor& t, int root) override;
  void barrier() override;
  void max_with_index(Tensor& value, Tensor& index) override;
  bool all_ok(bool ok) override;
  // MPI_Alltoallv of bytes (device tensors staged through the host).
  void all_to_all(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                  const std::vector<int64_t>& recv_rows) override;
  // MPI_Send / MPI_Recv of bytes (device tensors staged through the host).
  void send(const Tensor& t, int peer) override;
  void recv(Tensor& t, int peer) override;

  MPI_Comm comm() const { return comm_; }

 private:
  void all_reduce(Tensor& t, MPI_Op op, const char* what);
  void all_reduce_host(Tensor& t, MPI_Op op, const char* what);
  // x[i] = ((x₀[i] + x₁[i]) + x₂[i]) + … over the ranks in order, for every i whatever n.
  void rank_order_sum(float* x, int n);
  void need_backend(const Tensor& t, const char* what) const;  // throws without one
  Tensor stage_in(const Tensor& t, const char* what);  // a host tensor holding t's values
  void stage_out(const Tensor& host, Tensor& t);       // t = host, if t is not that host tensor

  MPI_Comm comm_;
  Backend* backend_;
  int rank_ = 0, size_ = 1;
};

// Throws linnet::Error naming `call`, the file and line, and MPI's message for `code`.
void mpi_check(int code, const char* call, const char* file, int line);

}  // namespace linnet

#define LINNET_MPI_CHECK(expr) ::linnet::mpi_check((expr), #expr, __FILE__, __LINE__)
