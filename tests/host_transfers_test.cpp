// Host ↔ device traffic per step, counted on the CPU backend (where a GPU would pay a copy and
// a wait for each): a decode step's plan — token ids, positions, cache rows, slots and the
// rows for the head — goes over in one upload_many, and its choices come back in one
// to_host_many; no single uploads or reads beside them.
#include <gtest/gtest.h>

#include "core/cpu/cpu_backend.h"
#include "model_fixtures.h"

namespace linnet {
namespace {

class CountingBackend : public CpuBackend {
 public:
  int uploads = 0, upload_batches = 0, reads = 0, read_batches = 0;
  void reset() { uploads = upload_batches = reads = read_batches = 0; }

  Tensor upload(const Tensor& host) override {
    if (!in_batch_) ++uploads;
    return CpuBackend::upload(host);
  }
  std::vector<Tensor> upload_many(const std::vector<Tensor>& hosts) override {
    ++upload_batches;
    in_batch_ = true;
    auto out = CpuBackend::upload_many(hosts);
    in_batch_ = false;
    return out;
  }
  Tensor to_host(const Tensor& t) override {
    if (!in_batch_) ++reads;
    return CpuBackend::to_host(t);
  }
  std::vector<Tensor> to_host_many(const std::vector<Tensor>& ts) override {
    ++read_batches;
    in_batch_ = true;
    auto out = CpuBackend::to_host_many(ts);
    in_batch_ = false;
    return out;
  }

 private:
  bool in_batch_ = false;
};

TEST(HostTransfers, OneUploadAndOneReadBackPerDecodeStep) {
  const ModelConfig config = testing::tiny_config();
  const Generics g = bind_generics(config, RunOptions{4, 32, 1, 8, std::nullopt});
  CountingBackend be;
  SingleCommunicator comm;
  RandomWeights w(7);
  Model model(config, g, w, be, comm);
  const Tensor token = Tensor::from_ints({4, 1}, std::vector<int64_t>{3, 5, 7, 9}, DType::i32);
  for (float temperature : {0.0f, 0.8f}) {
    SCOPED_TRACE(temperature);
    be.reset();
    const int64_t steps = 6;
    if (temperature == 0)
      model.generate(token, 0, steps);
    else
      model.sample(token, 0, Tensor::from_ints({2}, std::vector<int64_t>{1, 2}, DType::i64), temperature, steps);
    EXPECT_EQ(be.upload_batches, steps);
    EXPECT_EQ(be.uploads, 0);
    EXPECT_EQ(be.read_batches, steps);
    EXPECT_EQ(be.reads, 0);
  }
}

}  // namespace
}  // namespace linnet
