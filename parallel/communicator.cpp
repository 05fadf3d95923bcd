#include <cstring>

#include "parallel/communicator.h"

namespace linnet {

std::string first_error(Communicator& comm, const std::string& mine) {
  if (comm.all_ok(mine.empty())) return "";
  if (comm.size() == 1) return mine;
  // Every rank's message length (host tensors: every communicator takes them), then the
  // lowest failing rank's message.
  Tensor len = Tensor::from_ints({1}, {static_cast<int64_t>(mine.size())}, DType::i64);
  Tensor all = Tensor::zeros({comm.size(), 1}, DType::i64);
  comm.all_gather(len, all);
  const std::vector<int64_t> lengths = all.to_ints();
  int root = 0;
  while (root < comm.size() && lengths[static_cast<size_t>(root)] == 0) ++root;
  if (root == comm.size()) return "a rank of the shard group failed";  // all_ok said so
  const int64_t n = lengths[static_cast<size_t>(root)];
  Tensor bytes = Tensor::zeros({(n + 3) / 4}, DType::i32);
  if (comm.rank() == root) std::memcpy(bytes.data(), mine.data(), mine.size());
  comm.broadcast(bytes, root);
  const std::string text(static_cast<const char*>(bytes.data()), static_cast<size_t>(n));
  return comm.rank() == root ? text : str(text, " (found by shard ", root, ")");
}

std::vector<int64_t> exchange_counts(Communicator& comm, const std::vector<int64_t>& send_rows) {
  const int n = comm.size();
  LINNET_CHECK(static_cast<int>(send_rows.size()) == n, "exchange_counts: ", send_rows.size(), " counts for ", n,
               " ranks");
  Tensor send = Tensor::from_ints({n, 1}, send_rows, DType::i64);
  Tensor recv = Tensor::zeros({n, 1}, DType::i64);
  const std::vector<int64_t> ones(static_cast<size_t>(n), 1);
  comm.all_to_all(send, ones, recv, ones);
  return recv.to_ints();
}

void SingleCommunicator::send(const Tensor&, int peer) {
  throw Error(str("send to rank ", peer, " of a group of one rank"));
}

void SingleCommunicator::recv(Tensor&, int peer) { throw Error(str("recv from rank ", peer, " of a group of one rank")); }

}  // namespace linnet
