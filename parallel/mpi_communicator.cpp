#include "parallel/mpi_communicator.h"

#include <climits>
#include <cstdio>
#include <cstring>
#include <vector>

namespace linnet {

void mpi_check(int code, const char* call, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) std::snprintf(text, sizeof text, "MPI error %d", code);
  throw Error(str(file, ":", line, ": ", call, " failed: ", text));
}

namespace {

int count_of(int64_t n, const Tensor& t, const char* what) {
  if (n > INT_MAX)
    throw Error(str("mpi ", what, " of ", t.describe(), ": ", n, " elements exceed MPI's int count"));
  return static_cast<int>(n);
}

MPI_Datatype reduce_type(DType d) {
  switch (d) {
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;  // bf16 / f16: widened to f32 first
  }
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, Backend* backend) : comm_(comm), backend_(backend) {
  LINNET_CHECK(comm != MPI_COMM_NULL, "MpiCommunicator over MPI_COMM_NULL");
  LINNET_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  LINNET_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

void MpiCommunicator::need_backend(const Tensor& t, const char* what) const {
  if (!backend_)
    throw Error(str("mpi ", what, " of device tensor ", t.describe(), " (on ", device_name(t.device()),
                    "): the communicator has no backend to stage it through the host"));
}

Tensor MpiCommunicator::stage_in(const Tensor& t, const char* what) {
  if (t.device() == Device::cpu) return t;
  need_backend(t, what);
  Tensor host = backend_->to_host(t);
  LINNET_CHECK(host.device() == Device::cpu && host.numel() == t.numel() && host.dtype() == t.dtype(),
               "backend ", backend_->name(), " to_host of ", t.describe(), " gave ", host.describe());
  return host;
}

void MpiCommunicator::stage_out(const Tensor& host, Tensor& t) {
  if (t.device() == Device::cpu) {
    if (host.data() != t.data()) std::memcpy(t.data(), host.data(), t.nbytes());
    return;
  }
  backend_->copy_from_host(host, t);
}

// MPI_Allreduce picks its algorithm by message size (OpenMPI: recursive doubling, ring,
// segmented ring), and with three or more ranks each associates a float sum its own way: an
// element's bits would change with the number of tokens in the call. So float sums over 3+
// ranks go in rank order: rank c sums chunk c of everyone's values (an all-to-all), then the
// sums are gathered. The same bytes move as in a ring all-reduce. Two ranks' a + b needs no
// order; integer sums and maxima are exact.
void MpiCommunicator::rank_order_sum(float* x, int n) {
  // Small sums (a decode step's rows): every rank's values gathered and added here — one
  // collective instead of two, which is what a few hundred floats cost.
  if (static_cast<int64_t>(n) * size_ * static_cast<int64_t>(sizeof(float)) <= kGatherSumBytes) {
    std::vector<float> all(static_cast<size_t>(n) * size_);
    LINNET_MPI_CHECK(MPI_Allgather(x, n, MPI_FLOAT, all.data(), n, MPI_FLOAT, comm_));
    for (int i = 0; i < n; ++i) {
      float s = all[i];
      for (int r = 1; r < size_; ++r) s = s + all[static_cast<size_t>(r) * n + i];
      x[i] = s;
    }
    return;
  }
  std::vector<int> begin(static_cast<size_t>(size_) + 1), count(static_cast<size_t>(size_));
  for (int r = 0; r <= size_; ++r) begin[r] = static_cast<int>(static_cast<int64_t>(n) * r / size_);
  for (int r = 0; r < size_; ++r) count[r] = begin[r + 1] - begin[r];
  const int mine = count[rank_];
  std::vector<float> parts(static_cast<size_t>(mine) * size_);
  std::vector<int> recv_count(static_cast<size_t>(size_), mine), recv_at(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) recv_at[r] = r * mine;
  LINNET_MPI_CHECK(MPI_Alltoallv(x, count.data(), begin.data(), MPI_FLOAT, parts.data(), recv_count.data(),
                                 recv_at.data(), MPI_FLOAT, comm_));
  float* sum = x + begin[rank_];
  for (int i = 0; i < mine; ++i) {
    float s = parts[i];
    for (int r = 1; r < size_; ++r) s = s + parts[static_cast<size_t>(r) * mine + i];
    sum[i] = s;
  }
  LINNET_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, count.data(), begin.data(), MPI_FLOAT, comm_));
}

void MpiCommunicator::all_reduce_host(Tensor& t, MPI_Op op, const char* what) {
  const int n = count_of(t.numel(), t, what);
  if (n == 0) return;
  const bool in_order = op == MPI_SUM && size_ > 2 && is_float(t.dtype());
  const MPI_Datatype type = reduce_type(t.dtype());
  if (type != MPI_DATATYPE_NULL) {
    if (in_order)
      rank_order_sum(t.ptr<float>(), n);
    else
      LINNET_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.data(), n, type, op, comm_));
    return;
  }
  LINNET_CHECK(t.dtype() == DType::bf16 || t.dtype() == DType::f16, "mpi ", what, " of ", t.describe());
  std::vector<float> wide(static_cast<size_t>(n));
  convert(t.data(), t.dtype(), wide.data(), DType::f32, wide.size());
  if (in_order)
    rank_order_sum(wide.data(), n);
  else
    LINNET_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, wide.data(), n, MPI_FLOAT, op, comm_));
  convert(wide.data(), DType::f32, t.data(), t.dtype(), wide.size());
}

void MpiCommunicator::all_reduce(Tensor& t, MPI_Op op, const char* what) {
  if (!t.defined()) throw Error(str("mpi ", what, " of an undefined tensor"));
  Tensor host = stage_in(t, what);
  all_reduce_host(host, op, what);
  stage_out(host, t);
}

void MpiCommunicator::all_reduce_sum(Tensor& t) { all_reduce(t, MPI_SUM, "all_reduce_sum"); }
void MpiCommunicator::all_reduce_max(Tensor& t) { all_reduce(t, MPI_MAX, "all_reduce_max"); }

void MpiCommunicator::all_gather(const Tensor& local, Tensor& out) {
  LINNET_CHECK(local.defined() && out.defined() && local.dtype() == out.dtype() &&
                   out.numel() == local.numel() * size_,
               "mpi all_gather of ", local.describe(), " into ", out.describe(), " over ", size_, " ranks");
  const int bytes = count_of(static_cast<int64_t>(local.nbytes()), local, "all_gather (bytes)");
  count_of(static_cast<int64_t>(out.nbytes()), out, "all_gather (bytes)");
  if (bytes == 0) return;
  const Tensor host_local = stage_in(local, "all_gather");
  if (out.device() != Device::cpu) need_backend(out, "all_gather");
  Tensor host_out = out.device() == Device::cpu ? out : Tensor::empty(out.shape(), out.dtype());
  LINNET_MPI_CHECK(
      MPI_Allgather(host_local.data(), bytes, MPI_BYTE, host_out.data(), bytes, MPI_BYTE, comm_));
  stage_out(host_out, out);
}

void MpiCommunicator::broadcast(Tensor& t, int root) {
  if (root < 0 || root >= size_) throw Error(str("mpi broadcast from root ", root, " of ", size_, " ranks"));
  LINNET_CHECK(t.defined(), "mpi broadcast of an undefined tensor");
  const int bytes = count_of(static_cast<int64_t>(t.nbytes()), t, "broadcast (bytes)");
  if (bytes == 0) return;
  // Only the root's values matter: the others receive into a fresh host buffer.
  Tensor host = t;
  if (t.device() != Device::cpu) {
    need_backend(t, "broadcast");
    host = rank_ == root ? stage_in(t, "broadcast") : Tensor::empty(t.shape(), t.dtype());
  }
  LINNET_MPI_CHECK(MPI_Bcast(host.data(), bytes, MPI_BYTE, root, comm_));
  stage_out(host, t);
}

void MpiCommunicator::barrier() { LINNET_MPI_CHECK(MPI_Barrier(comm_)); }

void MpiCommunicator::send(const Tensor& t, int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_) throw Error(str("mpi send from rank ", rank_, " to rank ", peer, " of ", size_));
  const int bytes = count_of(static_cast<int64_t>(t.nbytes()), t, "send (bytes)");
  if (bytes == 0) return;
  const Tensor host = stage_in(t, "send");
  LINNET_MPI_CHECK(MPI_Send(host.data(), bytes, MPI_BYTE, peer, 0, comm_));
}

void MpiCommunicator::recv(Tensor& t, int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_) throw Error(str("mpi recv on rank ", rank_, " from rank ", peer, " of ", size_));
  const int bytes = count_of(static_cast<int64_t>(t.nbytes()), t, "recv (bytes)");
  if (bytes == 0) return;
  Tensor host = t;
  if (t.device() != Device::cpu) {
    need_backend(t, "recv");
    host = Tensor::empty(t.shape(), t.dtype());
  }
  MPI_Status status;
  LINNET_MPI_CHECK(MPI_Recv(host.data(), bytes, MPI_BYTE, peer, 0, comm_, &status));
  int got = 0;
  LINNET_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &got));
  if (got != bytes) throw Error(str("mpi recv on rank ", rank_, ": rank ", peer, " sent ", got, " bytes, ", bytes, " expected (", t.describe(), ")"));
  stage_out(host, t);
}

void MpiCommunicator::max_with_index(Tensor& value, Tensor& index) {
  LINNET_CHECK(value.defined() && index.defined() && value.dtype() == DType::f32 && index.dtype() == DType::i32 &&
                   value.numel() == index.numel(),
               "mpi max_with_index of ", value.describe(), " and ", index.describe());
  static_assert(sizeof(int) == sizeof(int32_t), "MPI_FLOAT_INT pairs a float with an int");
  const int n = count_of(value.numel(), value, "max_with_index");
  if (n == 0) return;
  Tensor hv = stage_in(value, "max_with_index"), hi = stage_in(index, "max_with_index");
  // MPI_MAXLOC over (value, index): the largest value, and on equal values the lowest index.
  struct Pair {
    float value;
    int index;
  };
  std::vector<Pair> pairs(static_cast<size_t>(n));
  const float* v = hv.ptr<float>();
  int32_t* ix = hi.ptr<int32_t>();
  for (int i = 0; i < n; ++i) pairs[i] = {v[i], ix[i]};
  LINNET_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, pairs.data(), n, MPI_FLOAT_INT, MPI_MAXLOC, comm_));
  float* vo = hv.ptr<float>();
  for (int i = 0; i < n; ++i) {
    vo[i] = pairs[i].value;
    ix[i] = pairs[i].index;
  }
  stage_out(hv, value);
  stage_out(hi, index);
}

void MpiCommunicator::all_to_all(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                                 const std::vector<int64_t>& recv_rows) {
  LINNET_CHECK(static_cast<int>(send_rows.size()) == size_ && static_cast<int>(recv_rows.size()) == size_ &&
                   send.defined() && recv.defined() && send.dtype() == recv.dtype(),
               "mpi all_to_all of ", send.describe(), " into ", recv.describe(), " over ", size_, " ranks");
  auto rows_of = [](const Tensor& t) { return t.rank() == 0 ? int64_t{1} : t.dim(0); };
  int64_t sent = 0, got = 0;
  for (int r = 0; r < size_; ++r) {
    LINNET_CHECK(send_rows[r] >= 0 && recv_rows[r] >= 0, "mpi all_to_all: a negative row count");
    sent += send_rows[r], got += recv_rows[r];
  }
  LINNET_CHECK(sent == rows_of(send) && got == rows_of(recv), "mpi all_to_all: ", sent, " rows to send from ",
               send.describe(), ", ", got, " to receive into ", recv.describe());
  // Bytes per row: the same on both sides (rows of one width).
  const int64_t row = sent > 0 ? static_cast<int64_t>(send.nbytes()) / sent
                               : got > 0 ? static_cast<int64_t>(recv.nbytes()) / got : 0;
  LINNET_CHECK((sent == 0 || row * sent == static_cast<int64_t>(send.nbytes())) &&
                   (got == 0 || row * got == static_cast<int64_t>(recv.nbytes())),
               "mpi all_to_all: rows of different widths (", send.describe(), " → ", recv.describe(), ")");
  std::vector<int> send_count(static_cast<size_t>(size_)), send_at(static_cast<size_t>(size_));
  std::vector<int> recv_count(static_cast<size_t>(size_)), recv_at(static_cast<size_t>(size_));
  int64_t s_at = 0, r_at = 0;
  for (int r = 0; r < size_; ++r) {
    send_count[r] = count_of(send_rows[r] * row, send, "all_to_all (bytes)");
    recv_count[r] = count_of(recv_rows[r] * row, recv, "all_to_all (bytes)");
    send_at[r] = count_of(s_at, send, "all_to_all (offset)");
    recv_at[r] = count_of(r_at, recv, "all_to_all (offset)");
    s_at += send_rows[r] * row, r_at += recv_rows[r] * row;
  }
  const Tensor host_send = sent > 0 ? stage_in(send, "all_to_all") : send;
  if (recv.device() != Device::cpu) need_backend(recv, "all_to_all");
  Tensor host_recv = recv.device() == Device::cpu ? recv : Tensor::empty(recv.shape(), recv.dtype());
  char dummy = 0;  // a valid address where a side holds no bytes
  LINNET_MPI_CHECK(MPI_Alltoallv(sent > 0 ? host_send.data() : &dummy, send_count.data(), send_at.data(), MPI_BYTE,
                                 got > 0 ? host_recv.data() : &dummy, recv_count.data(), recv_at.data(), MPI_BYTE,
                                 comm_));
  if (got > 0) stage_out(host_recv, recv);
}

bool MpiCommunicator::all_ok(bool ok) {
  int flag = ok ? 1 : 0;
  LINNET_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_LAND, comm_));
  return flag != 0;
}

}  // namespace linnet
