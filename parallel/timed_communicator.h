// A communicator that times another: benchmarks report the cost of stitching shards apart
// from the compute. Each collective waits for the backend first, so the time is its own.
#pragma once
#include <chrono>

#include "core/backend.h"
#include "parallel/communicator.h"

namespace linnet {

class TimedCommunicator final : public Communicator {
 public:
  TimedCommunicator(Communicator& inner, Backend& backend) : inner_(inner), backend_(backend) {}
  double seconds() const { return seconds_; }
  void reset() { seconds_ = 0; }

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

 private:
  template <class F>
  void timed(F f) {
    if (inner_.size() == 1) return f();
    backend_.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    backend_.synchronize();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  Communicator& inner_;
  Backend& backend_;
  double seconds_ = 0;
};

}  // namespace linnet
