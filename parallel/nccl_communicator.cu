// NcclCommunicator (see nccl_communicator.h). No spdlog/fmt here: nvcc compiles this file.
#if defined(LINNET_HAVE_NCCL) && defined(LINNET_HAVE_MPI)
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "parallel/nccl_communicator.h"

namespace linnet {
namespace {

[[noreturn]] void cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  throw Error(str(file, ":", line, ": ", call, " failed: ", cudaGetErrorString(e)));
}

#define CUDA_COMM_CHECK(expr)                                            \
  do {                                                                   \
    const cudaError_t cuda_e_ = (expr);                                  \
    if (cuda_e_ != cudaSuccess) cuda_error(cuda_e_, #expr, __FILE__, __LINE__); \
  } while (0)

ncclDataType_t nccl_type(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::f8_e4m3:
    case DType::i8:
    case DType::u8:
    case DType::f8_e8m0: break;  // weights only: never reduced
  }
  throw Error(str("nccl: no NCCL type for ", t.describe()));
}

bool on_device(const Tensor& t) { return t.device() == Device::cuda; }

}  // namespace

namespace {
// Seconds NCCL may take to set up (LINNET_NCCL_TIMEOUT, default 300): a peer that died never
// answers, and a blocking init would wait for it for ever.
double init_timeout() {
  const char* v = std::getenv("LINNET_NCCL_TIMEOUT");
  const double s = v ? std::atof(v) : 300.0;
  return s > 0 ? s : 300.0;
}
}  // namespace

void NcclCommunicator::abort_locked() {
  if (ncclComm* c = nccl_.exchange(nullptr)) ncclCommAbort(c);
}

// Polls a non-blocking communicator until its last call is done: an error (or the deadline,
// during setup) aborts it and throws.
void NcclCommunicator::wait(int code, const char* call, double timeout_s) {
  ncclResult_t r = static_cast<ncclResult_t>(code);
  const auto t0 = std::chrono::steady_clock::now();
  for (int spins = 0; r == ncclInProgress; ++spins) {
    if (failed_.load()) break;
    if (timeout_s > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      {
        std::lock_guard lock(abort_mu_);
        abort_locked();
      }
      throw Error(str("nccl: ", call, " did not finish within ", timeout_s, " s (a rank gone?); aborted"));
    }
    // Collectives are usually queued within microseconds: spin first, then sleep.
    if (spins > 2000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    std::lock_guard lock(abort_mu_);
    if (!nccl_) break;  // the watchdog aborted it (failed_ says why)
    ncclCommGetAsyncError(nccl_, &r);
  }
  if (failed_.load()) throw Error(str("nccl: the communicator failed and was aborted: ", error_));
  if (r != ncclSuccess) {
    const std::string why = ncclGetErrorString(r);
    {
      std::lock_guard lock(abort_mu_);
      abort_locked();
    }
    throw Error(str("nccl: ", call, " failed: ", why));
  }
}

NcclCommunicator::NcclCommunicator(MPI_Comm comm, int cuda_device, CUstream_st* stream, Backend* backend)
    : mpi_(comm, backend), device_(cuda_device), stream_(stream), backend_(backend) {
  std::string failure;
  for (int attempt = 0; attempt < 2; ++attempt) {
    // Rank 0 makes the unique id; it and whether that worked reach every rank, so a failure
    // there throws everywhere instead of leaving the others waiting.
    struct {
      int ok;
      ncclUniqueId id;
    } setup{};
    if (mpi_.rank() == 0) setup.ok = ncclGetUniqueId(&setup.id) == ncclSuccess ? 1 : 0;
    LINNET_MPI_CHECK(MPI_Bcast(&setup, sizeof setup, MPI_BYTE, 0, comm));
    if (!setup.ok) throw Error("nccl: rank 0 could not make a NCCL unique id (ncclGetUniqueId)");
    failure.clear();
    try {
      CUDA_COMM_CHECK(cudaSetDevice(device_));
      // Non-blocking: the setup is polled against a deadline instead of waiting for ever.
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      ncclComm* c = nullptr;
      const ncclResult_t r = ncclCommInitRankConfig(&c, mpi_.size(), setup.id, mpi_.rank(), &config);
      nccl_ = c;
      wait(r, "ncclCommInitRankConfig", init_timeout());
      // NCCL connects its rings lazily, at the first collective, and allocates their buffers
      // then: one small all-reduce here keeps that inside the retry below.
      if (backend_) {
        Tensor one = backend_->zeros({1}, DType::f32);
        backend_->flush();  // the zeroing is on the stream before the all-reduce
        wait(ncclAllReduce(one.data(), one.data(), 1, ncclFloat32, ncclSum, nccl_, stream_), "ncclAllReduce (warm-up)",
             init_timeout());
        // Sends and receives connect lazily too, peer by peer: the rank-order sum's, likewise.
        if (mpi_.size() > 2) {
          Tensor few = backend_->zeros({mpi_.size()}, DType::f32);
          rank_order_sum(few, init_timeout());
        }
        backend_->flush();
        CUDA_COMM_CHECK(cudaStreamSynchronize(stream_));
      }
    } catch (const Error& e) {
      failure = e.what();
    }
    // A setup that failed while the backend's pool held free blocks (NCCL reports a failed
    // device allocation as "unhandled cuda error", not as memory): every rank gives its cache
    // back and tries once more, with a fresh id. A timeout is not retried (a peer is gone).
    const bool retry = !failure.empty() && failure.find("did not finish within") == std::string::npos;
    if (attempt == 0 && backend_ && !mpi_.all_ok(!retry)) {
      backend_->release_cached_memory();
      {
        std::lock_guard lock(abort_mu_);
        abort_locked();
      }
      failure.clear();
      continue;
    }
    break;
  }
  if (!mpi_.all_ok(failure.empty())) {
    {
      std::lock_guard lock(abort_mu_);
      abort_locked();
    }
    throw Error(failure.empty() ? std::string("nccl: another rank failed to set up NCCL")
                                : str("nccl on GPU ", device_, ": ", failure));
  }
  // The watchdog: an error NCCL meets later (a peer gone mid-collective) would leave the
  // stream waiting for ever; it aborts the communicator, which ends the kernels, so the
  // next wait on the stream fails and the job ends.
  // It also aborts when a collective is still unfinished LINNET_NCCL_TIMEOUT after it was
  // enqueued: a peer lost over NVLink or P2P often raises no error at all.
  const double deadline_s = init_timeout();
  watchdog_ = std::thread([this, deadline_s] {
    cudaSetDevice(device_);
    while (!stop_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      double overdue_s = 0;
      {
        std::lock_guard lock(pending_mu_);
        while (!pending_.empty() && cudaEventQuery(pending_.front().first) != cudaErrorNotReady) {
          spare_events_.push_back(pending_.front().first);
          pending_.pop_front();
        }
        if (!pending_.empty())
          overdue_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - pending_.front().second).count();
      }
      std::lock_guard lock(abort_mu_);
      if (!nccl_ || stop_.load()) continue;
      ncclResult_t r = ncclSuccess;
      std::string why;
      if (ncclCommGetAsyncError(nccl_, &r) == ncclSuccess && r != ncclSuccess && r != ncclInProgress)
        why = ncclGetErrorString(r);
      else if (overdue_s > deadline_s)
        why = str("a collective enqueued ", static_cast<int>(overdue_s), " s ago has not finished (LINNET_NCCL_TIMEOUT ",
                  deadline_s, " s; a rank gone?)");
      if (!why.empty()) {
        error_ = why;
        failed_.store(true);
        abort_locked();
        return;
      }
    }
  });
}

NcclCommunicator::~NcclCommunicator() {
  stop_.store(true);
  if (watchdog_.joinable()) watchdog_.join();
  if (nccl_ && !failed_.load()) ncclCommDestroy(nccl_);
  cudaSetDevice(device_);
  for (auto& [e, t] : pending_) cudaEventDestroy(e);
  for (CUevent_st* e : spare_events_) cudaEventDestroy(e);
}

void NcclCommunicator::mark_enqueued() {
  std::lock_guard lock(pending_mu_);
  cudaEvent_t e = nullptr;
  if (!spare_events_.empty()) {
    e = spare_events_.back();
    spare_events_.pop_back();
  } else {
    CUDA_COMM_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  const cudaError_t r = cudaEventRecord(e, stream_);
  if (r != cudaSuccess) {
    spare_events_.push_back(e);
    cuda_error(r, "cudaEventRecord(collective done)", __FILE__, __LINE__);
  }
  pending_.emplace_back(e, std::chrono::steady_clock::now());
}

// Runs `call` on the communicator under abort_mu_, so the watchdog can't abort (free) it
// while a collective is being enqueued; the result is then polled by wait().
template <class F>
int NcclCommunicator::issue(F&& call) {
  // The backend may hold recorded launches (CUDA graphs): they go on the stream first, so the
  // collective reads what they write.
  if (backend_) backend_->flush();
  std::lock_guard lock(abort_mu_);
  ncclComm* c = nccl_.load();
  if (!c) throw Error(str("nccl: the communicator failed and was aborted: ", error_));
  return static_cast<int>(call(c));
}

// Over 3+ ranks a ring or tree all-reduce associates a float sum by chunks whose bounds move
// with the element count: a token's bits would change with the batch. So, as MpiCommunicator
// does: small sums gather everyone's values and add them in rank order; larger ones send rank
// c chunk c of every rank's values (grouped sends and receives), which it adds in rank order,
// and the sums are all-gathered: the bits MpiCommunicator gives, and the bytes a ring moves.
void NcclCommunicator::rank_order_sum(Tensor& t, double timeout_s) {
  const int S = size(), me = rank();
  const int64_t n = t.numel(), c = (n + S - 1) / S;
  if (n * S * static_cast<int64_t>(sizeof(float)) <= MpiCommunicator::kGatherSumBytes) {
    // Small sums: everyone's values gathered, added in rank order here (one collective).
    Tensor mine = backend_->empty({n}, DType::f32);
    Tensor flat_mine = mine.reshape(t.shape());
    backend_->convert(t, flat_mine);
    Tensor all = backend_->empty({S, n}, DType::f32);
    wait(issue([&](ncclComm* comm) {
           return ncclAllGather(mine.data(), all.data(), static_cast<size_t>(n), ncclFloat32, comm, stream_);
         }),
         "ncclAllGather (rank-order sum)", timeout_s);
    mark_enqueued();
    Tensor sum = all.rows(0, 1);
    for (int q = 1; q < S; ++q) backend_->add(sum, all.rows(q, q + 1));
    backend_->convert(sum.reshape(t.shape()), t);
    return;
  }
  Tensor wide = backend_->zeros({S * c}, DType::f32);  // padded to S whole chunks
  Tensor flat = wide.rows(0, n).reshape(t.shape());
  backend_->convert(t, flat);
  Tensor parts = backend_->empty({S, c}, DType::f32);
  const size_t chunk_bytes = static_cast<size_t>(c) * sizeof(float);
  backend_->flush();  // the conversion into `wide` is on the stream before this copy reads it
  CUDA_COMM_CHECK(cudaMemcpyAsync(parts.rows(me, me + 1).data(), static_cast<char*>(wide.data()) + me * chunk_bytes,
                                  chunk_bytes, cudaMemcpyDeviceToDevice, stream_));
  wait(issue([&](ncclComm* comm) {
         // The group is always closed; the first failing call's code wins over the end's.
         ncclResult_t r = ncclGroupStart();
         if (r != ncclSuccess) return r;
         for (int q = 0; q < S && r == ncclSuccess; ++q) {
           if (q == me) continue;
           r = ncclSend(static_cast<char*>(wide.data()) + q * chunk_bytes, static_cast<size_t>(c), ncclFloat32, q,
                        comm, stream_);
           if (r == ncclSuccess)
             r = ncclRecv(parts.rows(q, q + 1).data(), static_cast<size_t>(c), ncclFloat32, q, comm, stream_);
         }
         const ncclResult_t end = ncclGroupEnd();
         return r != ncclSuccess ? r : end;
       }),
       "ncclSend/ncclRecv (rank-order sum)", timeout_s);
  Tensor sum = parts.rows(0, 1);
  for (int q = 1; q < S; ++q) backend_->add(sum, parts.rows(q, q + 1));
  wait(issue([&](ncclComm* comm) {
         return ncclAllGather(sum.data(), wide.data(), static_cast<size_t>(c), ncclFloat32, comm, stream_);
       }),
       "ncclAllGather (rank-order sum)", timeout_s);
  mark_enqueued();
  backend_->convert(flat, t);
}

void NcclCommunicator::all_reduce(Tensor& t, bool sum) {
  if (!on_device(t)) {
    if (sum)
      mpi_.all_reduce_sum(t);
    else
      mpi_.all_reduce_max(t);
    return;
  }
  if (t.numel() == 0) return;
  CUDA_COMM_CHECK(cudaSetDevice(device_));
  const bool is_float_sum = sum && (t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16);
  if (is_float_sum && size() > 2 && backend_) {
    rank_order_sum(t);
    return;
  }
  // bf16 / f16 sums in f32, as the MPI path sums: NCCL's ring would round to 16 bits at every
  // hop, and the result must not depend on which communicator was picked. A max is exact.
  if (is_float_sum && t.dtype() != DType::f32 && backend_) {
    Tensor wide = backend_->empty(t.shape(), DType::f32);
    backend_->convert(t, wide);
    wait(issue([&](ncclComm* comm) {
           return ncclAllReduce(wide.data(), wide.data(), static_cast<size_t>(wide.numel()), ncclFloat32, ncclSum,
                                comm, stream_);
         }),
         "ncclAllReduce");
    mark_enqueued();
    backend_->convert(wide, t);
    return;
  }
  wait(issue([&](ncclComm* comm) {
         return ncclAllReduce(t.data(), t.data(), static_cast<size_t>(t.numel()), nccl_type(t),
                              sum ? ncclSum : ncclMax, comm, stream_);
       }),
       "ncclAllReduce");
  mark_enqueued();
}

void NcclCommunicator::all_reduce_sum(Tensor& t) { all_reduce(t, true); }
void NcclCommunicator::all_reduce_max(Tensor& t) { all_reduce(t, false); }

void NcclCommunicator::all_gather(const Tensor& local, Tensor& out) {
  if (!on_device(local) || !on_device(out)) {
    mpi_.all_gather(local, out);  // host (or mixed, staged) tensors
    return;
  }
  LINNET_CHECK(local.dtype() == out.dtype() && out.numel() == local.numel() * size(), "nccl all_gather of ",
               local.describe(), " into ", out.describe(), " over ", size(), " ranks");
  if (local.numel() == 0) return;
  CUDA_COMM_CHECK(cudaSetDevice(device_));
  wait(issue([&](ncclComm* comm) {
         return ncclAllGather(local.data(), out.data(), local.nbytes(), ncclInt8, comm, stream_);
       }),
       "ncclAllGather");
  mark_enqueued();
}

void NcclCommunicator::broadcast(Tensor& t, int root) {
  if (!on_device(t)) {
    mpi_.broadcast(t, root);
    return;
  }
  if (root < 0 || root >= size()) throw Error(str("nccl broadcast from root ", root, " of ", size(), " ranks"));
  if (t.numel() == 0) return;
  CUDA_COMM_CHECK(cudaSetDevice(device_));
  wait(issue([&](ncclComm* comm) {
         return ncclBroadcast(t.data(), t.data(), t.nbytes(), ncclInt8, root, comm, stream_);
       }),
       "ncclBroadcast");
  mark_enqueued();
}

void NcclCommunicator::send(const Tensor& t, int peer) {
  if (!on_device(t)) {
    mpi_.send(t, peer);
    return;
  }
  if (peer < 0 || peer >= size() || peer == rank()) throw Error(str("nccl send from rank ", rank(), " to rank ", peer));
  if (t.nbytes() == 0) return;
  CUDA_COMM_CHECK(cudaSetDevice(device_));
  if (backend_) backend_->flush();  // t is on the stream before the send reads it
  wait(issue([&](ncclComm* comm) { return ncclSend(t.data(), t.nbytes(), ncclInt8, peer, comm, stream_); }), "ncclSend");
  mark_enqueued();
}

void NcclCommunicator::recv(Tensor& t, int peer) {
  if (!on_device(t)) {
    mpi_.recv(t, peer);
    return;
  }
  if (peer < 0 || peer >= size() || peer == rank()) throw Error(str("nccl recv on rank ", rank(), " from rank ", peer));
  if (t.nbytes() == 0) return;
  CUDA_COMM_CHECK(cudaSetDevice(device_));
  wait(issue([&](ncclComm* comm) { return ncclRecv(t.data(), t.nbytes(), ncclInt8, peer, comm, stream_); }), "ncclRecv");
  mark_enqueued();
}

void NcclCommunicator::all_to_all(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                                  const std::vector<int64_t>& recv_rows) {
  if (!on_device(send) || !on_device(recv)) {
    mpi_.all_to_all(send, send_rows, recv, recv_rows);  // host (or mixed, staged) tensors
    return;
  }
  const int S = size(), me = rank();
  LINNET_CHECK(static_cast<int>(send_rows.size()) == S && static_cast<int>(recv_rows.size()) == S &&
                   send.dtype() == recv.dtype(),
               "nccl all_to_all of ", send.describe(), " into ", recv.describe(), " over ", S, " ranks");
  int64_t sent = 0, got = 0;
  for (int q = 0; q < S; ++q) {
    LINNET_CHECK(send_rows[q] >= 0 && recv_rows[q] >= 0, "nccl all_to_all: a negative row count");
    sent += send_rows[q], got += recv_rows[q];
  }
  LINNET_CHECK(sent == send.dim(0) && got == recv.dim(0), "nccl all_to_all: ", sent, " rows to send from ",
               send.describe(), ", ", got, " to receive into ", recv.describe());
  const size_t row = sent > 0 ? send.nbytes() / static_cast<size_t>(sent)
                              : got > 0 ? recv.nbytes() / static_cast<size_t>(got) : 0;
  LINNET_CHECK((sent == 0 || row * static_cast<size_t>(sent) == send.nbytes()) &&
                   (got == 0 || row * static_cast<size_t>(got) == recv.nbytes()),
               "nccl all_to_all: rows of different widths (", send.describe(), " → ", recv.describe(), ")");
  if (sent == 0 && got == 0) return;
  CUDA_COMM_CHECK(cudaSetDevice(device_));
  std::vector<size_t> send_at(static_cast<size_t>(S) + 1, 0), recv_at(static_cast<size_t>(S) + 1, 0);
  for (int q = 0; q < S; ++q) {
    send_at[q + 1] = send_at[q] + static_cast<size_t>(send_rows[q]) * row;
    recv_at[q + 1] = recv_at[q] + static_cast<size_t>(recv_rows[q]) * row;
  }
  const char* src = static_cast<const char*>(send.data());
  char* dst = static_cast<char*>(recv.data());
  if (send_rows[me] > 0) {
    LINNET_CHECK(send_rows[me] == recv_rows[me], "nccl all_to_all: ", send_rows[me], " rows to itself, ",
                 recv_rows[me], " expected");
    if (backend_) backend_->flush();  // the rows are on the stream before the copy reads them
    CUDA_COMM_CHECK(cudaMemcpyAsync(dst + recv_at[me], src + send_at[me], send_at[me + 1] - send_at[me],
                                    cudaMemcpyDeviceToDevice, stream_));
  }
  wait(issue([&](ncclComm* comm) {
         // The group is always closed; the first failing call's code wins over the end's.
         ncclResult_t r = ncclGroupStart();
         if (r != ncclSuccess) return r;
         for (int q = 0; q < S && r == ncclSuccess; ++q) {
           if (q == me) continue;
           if (send_rows[q] > 0)
             r = ncclSend(src + send_at[q], send_at[q + 1] - send_at[q], ncclInt8, q, comm, stream_);
           if (r == ncclSuccess && recv_rows[q] > 0)
             r = ncclRecv(dst + recv_at[q], recv_at[q + 1] - recv_at[q], ncclInt8, q, comm, stream_);
         }
         const ncclResult_t end = ncclGroupEnd();
         return r != ncclSuccess ? r : end;
       }),
       "ncclSend/ncclRecv (all_to_all)");
  mark_enqueued();
}

extern "C" Communicator* linnet_cuda_make_nccl_communicator(MPI_Comm comm, int cuda_device, void* stream,
                                                            Backend* backend) {
  return new NcclCommunicator(comm, cuda_device, static_cast<CUstream_st*>(stream), backend);
}

}  // namespace linnet
#endif
