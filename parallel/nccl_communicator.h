// NcclCommunicator: the Communicator for ranks on distinct GPUs (docs/entries.md "Ranks",
// docs/parallel.md).
//
// - Device tensors: ncclAllReduce (sum in f32 for bf16/f16 — as the MPI path — else in the
//   tensor's dtype; max in its own), ncclAllGather and ncclBroadcast (raw bytes, any dtype),
//   enqueued on `stream`. Float sums over 3+ ranks are added in rank order instead (grouped
//   sends and receives, then a gather), as MpiCommunicator does: the same bits for any batch.
// - Setup is non-blocking with a deadline (LINNET_NCCL_TIMEOUT, default 300 s) and aborts on
//   failure; a watchdog thread aborts the communicator on an asynchronous NCCL error, so a
//   peer lost mid-run ends this rank instead of hanging it.
// - Host tensors, max_with_index, all_ok and barrier go through an inner MpiCommunicator over
//   the same MPI communicator (device tensors given to max_with_index are staged through
//   `backend`, whose to_host waits for the stream).
//
// `stream` must be the CUDA backend's stream (CudaBackend::stream()): the collectives are
// then ordered after the kernels that produced their inputs and before those that read their
// results, with no extra synchronisation; like the backend's ops they return before the work
// is done. `cuda_device` is this rank's GPU (MpiRuntime::local_rank()). Two ranks on one GPU
// are refused by NCCL: use MpiCommunicator (staging through the host) for that.
//
// The constructor is collective over `comm` (rank 0's unique id is broadcast by MPI) and
// throws linnet::Error on every rank when any rank fails to set up NCCL. NCCL and CUDA errors
// throw linnet::Error naming the call, file and line.
//
// This header needs no CUDA or NCCL headers. The class is compiled into the CUDA module
// (core/cuda_module.h) when NCCL is found; the launcher makes one through
// make_nccl_communicator, which asks the module.
#pragma once
#if defined(LINNET_HAVE_MPI)
#include <memory>

#include "parallel/mpi_communicator.h"

namespace linnet {
// A NcclCommunicator over `comm` (collective), from the CUDA module; throws linnet::Error
// when the module is absent or was built without NCCL. `stream`: the backend's cudaStream_t.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int cuda_device, void* stream, Backend* backend);
}  // namespace linnet
#endif

#if defined(LINNET_HAVE_NCCL) && defined(LINNET_HAVE_MPI)

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

struct ncclComm;     // ncclComm_t is ncclComm*
struct CUstream_st;  // cudaStream_t is CUstream_st*
struct CUevent_st;   // cudaEvent_t is CUevent_st*

namespace linnet {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm comm, int cuda_device, CUstream_st* stream, Backend* backend);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return mpi_.rank(); }
  int size() const override { return mpi_.size(); }
  std::string name() const override { return "nccl"; }

  void all_reduce_sum(Tensor& t) override;
  void all_reduce_max(Tensor& t) override;
  void all_gather(const Tensor& local, Tensor& out) override;
  void broadcast(Tensor& t, int root) override;
  void barrier() override { mpi_.barrier(); }
  void max_with_index(Tensor& value, Tensor& index) override { mpi_.max_with_index(value, index); }
  bool all_ok(bool ok) override { return mpi_.all_ok(ok); }
  // Device tensors: grouped ncclSend / ncclRecv per peer (this rank's own rows copied on the
  // stream); host tensors through MPI.
  void all_to_all(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                  const std::vector<int64_t>& recv_rows) override;
  // Device tensors: ncclSend / ncclRecv of bytes on the communicator's stream; host ones through MPI.
  void send(const Tensor& t, int peer) override;
  void recv(Tensor& t, int peer) override;

 private:
  void all_reduce(Tensor& t, bool sum);
  // Float sums over 3+ ranks, in rank order (see the .cu); timeout_s as wait()'s.
  void rank_order_sum(Tensor& t, double timeout_s = 0);
  template <class F>
  int issue(F&& call);  // call(comm) under abort_mu_; throws once the communicator is aborted
  // r is an ncclResult_t (int-compatible enum): polls the non-blocking communicator.
  void wait(int r, const char* call, double timeout_s = 0);
  // Aborts the communicator once, whichever thread sees the failure first; abort_mu_ held.
  void abort_locked();

  MpiCommunicator mpi_;
  int device_;
  CUstream_st* stream_;
  Backend* backend_;
  std::atomic<ncclComm*> nccl_{nullptr};  // read by the watchdog too
  std::mutex abort_mu_;                    // polls and the abort never overlap: no use after free
  std::thread watchdog_;
  std::atomic<bool> stop_{false}, failed_{false};
  std::string error_;  // what the watchdog saw (set before failed_)
  // Each enqueued collective's completion event and when it was enqueued: one still pending
  // after LINNET_NCCL_TIMEOUT (a peer gone without an error NCCL could report, as over NVLink)
  // makes the watchdog abort, instead of the stream waiting for ever.
  void mark_enqueued();
  std::mutex pending_mu_;
  std::deque<std::pair<CUevent_st*, std::chrono::steady_clock::time_point>> pending_;
  std::vector<CUevent_st*> spare_events_;
};

}  // namespace linnet
#endif
