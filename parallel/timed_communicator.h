// A communicator that times another: benchmarks report the cost of stitching shards apart
// from the compute. Timed by the backend's timer (CUDA events on a GPU), so timing adds no
// wait: what is measured is the collective's own time on the stream.
#pragma once
#include <memory>

#include "core/backend.h"
#include "parallel/communicator.h"

namespace linnet {

class TimedCommunicator final : public Communicator {
 public:
  TimedCommunicator(Communicator& inner, Backend& backend)
      : inner_(inner), timer_(backend.make_timer()), a2a_timer_(backend.make_timer()) {}
  // Every collective's time (the all-to-alls included), and the all-to-alls' alone.
  double seconds() { return timer_->seconds(); }
  double all_to_all_seconds() { return a2a_timer_->seconds(); }
  void reset() {
    timer_->reset();
    a2a_timer_->reset();
  }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return inner_.name(); }
  void all_reduce_sum(Tensor& t) override { timed([&] { inner_.all_reduce_sum(t); }); }
  void all_reduce_max(Tensor& t) override { timed([&] { inner_.all_reduce_max(t); }); }
  void all_gather(const Tensor& local, Tensor& out) override { timed([&] { inner_.all_gather(local, out); }); }
  void broadcast(Tensor& t, int root) override { timed([&] { inner_.broadcast(t, root); }); }
  void barrier() override { timed([&] { inner_.barrier(); }); }
  void max_with_index(Tensor& v, Tensor& i) override { timed([&] { inner_.max_with_index(v, i); }); }
  bool all_ok(bool ok) override { return inner_.all_ok(ok); }
  void send(const Tensor& t, int peer) override { timed([&] { inner_.send(t, peer); }); }
  void recv(Tensor& t, int peer) override { timed([&] { inner_.recv(t, peer); }); }
  void all_to_all(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                  const std::vector<int64_t>& recv_rows) override {
    if (inner_.size() == 1) return inner_.all_to_all(send, send_rows, recv, recv_rows);
    a2a_timer_->start();
    timed([&] { inner_.all_to_all(send, send_rows, recv, recv_rows); });
    a2a_timer_->stop();
  }

 private:
  template <class F>
  void timed(F f) {
    if (inner_.size() == 1) return f();
    timer_->start();
    f();
    timer_->stop();
  }
  Communicator& inner_;
  std::unique_ptr<DeviceTimer> timer_, a2a_timer_;
};

}  // namespace linnet
