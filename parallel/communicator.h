// The collectives that stitch shards together (docs/entries.md "Weights and shards", "Ranks"). A
// layer sees only this interface: the single-rank version does nothing, MPI's works on host tensors
// (staging device tensors through the host), NCCL's on device tensors.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace linnet {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;

  // In place, element-wise over the group; tensors are f32 (or the compute dtype for sums).
  virtual void all_reduce_sum(Tensor& t) = 0;
  virtual void all_reduce_max(Tensor& t) = 0;
  // out [size, …local's shape…] = every rank's local, in rank order.
  virtual void all_gather(const Tensor& local, Tensor& out) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void barrier() = 0;
  // Per element: the largest value over the group and its index, the lowest index on ties
  // (argmax and Gumbel-max over vocab shards). value f32 [N], index i32 [N].
  virtual void max_with_index(Tensor& value, Tensor& index) = 0;
  // Whether every rank says `ok` (a failure one rank alone sees ends all of them cleanly).
  virtual bool all_ok(bool ok) = 0;
  // Rows to and from every rank (an all-to-all of variable counts, MPI_Alltoallv's): `send`
  // [Σ send_rows, W…] holds send_rows[r] rows for rank r, ranks in order; `recv` [Σ recv_rows,
  // W…] receives recv_rows[r] rows from rank r, ranks in order. recv_rows[r] must be what rank r
  // sends this one (exchange_counts gives it). Any dtype, rows of equal bytes on both sides;
  // both tensors on the host or both on the backend's device. The expert-parallel mixture of
  // experts sends each token's row to the ranks of its experts and the results back with it.
  virtual void all_to_all(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                          const std::vector<int64_t>& recv_rows) = 0;
  // Point to point (a pipeline stage's hidden states to the next, docs/parallel.md): `t` to rank
  // `peer`, which receives it into a tensor of the same bytes with recv(…, this rank). Any dtype;
  // host or the backend's device on either side.
  virtual void send(const Tensor& t, int peer) = 0;
  virtual void recv(Tensor& t, int peer) = 0;
};

// What every rank sends this one, given what this one sends each (send_rows[r] for rank r):
// an all_to_all of one i64 per pair. Collective.
std::vector<int64_t> exchange_counts(Communicator& comm, const std::vector<int64_t>& send_rows);

// The error one or more ranks of the group met ("" where none did), on every rank: the
// lowest such rank's message. `mine`: this rank's ("" when it has none). Collective.
std::string first_error(Communicator& comm, const std::string& mine);

// One rank: every collective is the identity.
class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  void all_reduce_sum(Tensor&) override {}
  void all_reduce_max(Tensor&) override {}
  void all_gather(const Tensor& local, Tensor& out) override;
  void broadcast(Tensor&, int) override {}
  void barrier() override {}
  void max_with_index(Tensor&, Tensor&) override {}
  bool all_ok(bool ok) override { return ok; }
  void all_to_all(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                  const std::vector<int64_t>& recv_rows) override;
  void send(const Tensor&, int peer) override;
  void recv(Tensor&, int peer) override;
};

}  // namespace linnet
