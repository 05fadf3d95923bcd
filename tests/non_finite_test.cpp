// Non-finite numbers: a checkpoint holding NaN or Inf is refused at load, naming the tensor
// and the index (transformers would compute NaN logits from it); and a non-finite activation
// propagates as it does in the reference — never masked into finite numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/loader.h"
#include "checkpoint/safetensors.h"
#include "core/cuda_module.h"
#include "model_fixtures.h"

using namespace linnet;
using namespace linnet::testing;
namespace fs = std::filesystem;

namespace {

// RandomWeights with one value replaced in one parameter.
class PlantedWeights final : public WeightSource {
 public:
  PlantedWeights(std::string card_name, int64_t index, float value)
      : name_(std::move(card_name)), index_(index), value_(value) {}
  Tensor read(const ParamSpec& p, int64_t shard) override {
    Tensor t = random_.read(p, shard);
    if (p.card_name != name_) return t;
    std::vector<float> v = t.to_floats();
    v.at(static_cast<size_t>(index_)) = value_;
    return Tensor::from_floats(t.shape(), v, t.dtype());
  }

 private:
  RandomWeights random_{7};
  std::string name_;
  int64_t index_;
  float value_;
};

size_t count_nan(const Tensor& t) {
  size_t n = 0;
  for (float x : t.to_floats()) n += std::isnan(x);
  return n;
}

class NonFinite : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "cuda" && cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device is visible: " << cuda_status();
  }
};

}  // namespace

// transformers gives NaN for every logit of every token when one weight of a layer every
// token passes through is NaN (or ±Inf: its products meet as Inf − Inf or Inf · 0); so must
// linnet, through the packed attention (forward) and through the cache (prefill, decode).
TEST_P(NonFinite, AnActivationPropagatesAsInTheReference) {
  const ModelConfig c = tiny_config();
  const Generics g = bind_generics(c, {4, 32, 1, 8, std::nullopt});
  struct Case {
    const char* param;
    float value;
  };
  for (const Case& k : {Case{"layers[0].attention.k_proj.weight", NAN}, Case{"layers[0].attention.q_proj.weight", NAN},
                        Case{"layers[0].attention.k_proj.weight", INFINITY},
                        Case{"layers[0].mlp.gate.weight", NAN}, Case{"layers[1].mlp.down.weight", NAN},
                        Case{"layers[0].attention_norm.weight", NAN}, Case{"norm.weight", NAN},
                        Case{"layers[0].attention.v_proj.weight", INFINITY},
                        Case{"layers[0].mlp.up.weight", -INFINITY}}) {
    SCOPED_TRACE(std::string(k.param) + " = " + std::to_string(k.value));
    auto be = make_backend(GetParam());
    SingleCommunicator comm;
    PlantedWeights w(k.param, 0, k.value);
    Model m(c, g, w, *be, comm);
    const Tensor logits = m.forward(ids({2, 5}, {1, 5, 9, 13, 17, 2, 4, 8, 16, 32}));
    EXPECT_EQ(count_nan(logits), static_cast<size_t>(logits.numel())) << "forward: logits that are not NaN";
    m.prefill(ids({4, 3}, {1, 5, 9, 2, 4, 8, 3, 6, 9, 7, 7, 7}), 0);
    const Tensor step = m.decode(ids({4, 1}, {13, 16, 12, 7}), 3);
    EXPECT_EQ(count_nan(step), static_cast<size_t>(step.numel())) << "decode: logits that are not NaN";
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, NonFinite, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return std::string(info.param); });

// The loader refuses a non-finite weight naming the file, the tensor and the index, in every
// stored dtype, whether the tensor is read whole (a view of the file) or sliced per shard.
TEST(NonFiniteWeights, AreRefusedAtLoadNamingTensorAndIndex) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (const float bad : {NAN, INFINITY, -INFINITY}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(bad));
      const fs::path d = fs::temp_directory_path() / ("linnet_nonfinite_" + std::to_string(::getpid()));
      fs::remove_all(d);
      write_random_checkpoint(tiny_config(), d.string(), dt, 5);
      // Plant the value at index 77 of layer 1's k_proj, in the file's own bytes.
      const std::string name = "model.layers.1.self_attn.k_proj.weight";
      uint64_t offset = 0;
      {
        SafetensorsFile f((d / "model.safetensors").string());
        offset = f.data_start() + f.info(name).begin + 77 * dtype_size(dt);
      }
      const Tensor value = Tensor::from_floats({1}, {bad}, dt);
      {
        std::fstream io(d / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
        io.seekp(static_cast<std::streamoff>(offset));
        io.write(static_cast<const char*>(value.data()), static_cast<std::streamsize>(dtype_size(dt)));
      }
      auto be = make_cpu_backend();
      SingleCommunicator comm;
      try {
        load_model(d.string(), RunOptions{1, 16, 1, 8, std::nullopt}, *be, comm);
        ADD_FAILURE() << "loaded a checkpoint holding " << bad;
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(name), std::string::npos) << msg;
        EXPECT_NE(msg.find("[2, 13] (flat index 77)"), std::string::npos) << msg;  // of [16, 32]
        EXPECT_NE(msg.find(std::isnan(bad) ? "NaN" : "Inf"), std::string::npos) << msg;
        EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
      }
      fs::remove_all(d);
    }
  }
}
