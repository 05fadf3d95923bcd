// compressed-tensors decompresses a 16-bit model's weights in its scales' dtype: (q − zero) ·
// scale rounded to bf16 (f16), which is what transformers multiplies by. linnet rounds the same
// way (WeightLayout::dequant_in_scale_dtype, set by the loader from the stored scales' dtype),
// so a bf16 or f16 W4A16 checkpoint gives the bits of the dense checkpoint holding exactly the
// reference's weights. The kernels' rounding, format by format: BackendOps.QuantizedCases*.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include <unistd.h>

#include "architectures/hf_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "core/backend.h"
#include "parallel/communicator.h"
#include "run_self.h"
#include "runtime/loader.h"
#include "runtime/quantize_checkpoint.h"
#include "runtime/write_checkpoint.h"

using namespace linnet;
using linnet::testutil::ScratchDir;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// `q` (compressed-tensors W4A16, symmetric) with each weight_packed + weight_scale replaced by
// the dense weight (q − 8) · scale, computed in f32 and rounded to `dt` (stored in dt; f32:
// stored unrounded), written to `dense` without quantization_config. Returns how many weights
// that rounding changed.
int64_t write_dense_twin(const std::string& q, const std::string& dense, DType dt) {
  SafetensorsFile f(q + "/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> out;
  int64_t rounded = 0;
  for (const std::string& n : f.names()) {
    if (ends_with(n, ".weight_scale") || ends_with(n, ".weight_shape")) continue;
    if (!ends_with(n, ".weight_packed")) {  // (an f32 twin holds every tensor in f32, widened exactly)
      const Tensor t = f.read(n);
      out.emplace_back(n, dt == DType::f32 && is_float(t.dtype()) ? t.to(DType::f32) : t);
      continue;
    }
    const std::string weight = n.substr(0, n.size() - std::strlen("_packed"));
    const Tensor words = f.read(n);
    const std::vector<float> scales = f.read(weight + "_scale").to_floats();
    const int64_t rows = words.dim(0), per_row = words.dim(1), cols = per_row * 8;
    const int64_t groups = static_cast<int64_t>(scales.size()) / rows, g = cols / groups;
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint32_t word = words.ptr<uint32_t>()[r * per_row + c / 8];
        const float exact = (static_cast<float>((word >> (4 * (c % 8))) & 15u) - 8.0f) * scales[r * groups + c / g];
        w[r * cols + c] = round_to(dt, exact);
        rounded += w[r * cols + c] != exact;
      }
    out.emplace_back(weight, Tensor::from_floats({rows, cols}, w, dt));
  }
  fs::create_directories(dense);
  save_safetensors(dense + "/model.safetensors", out);
  json cfg = json::parse(std::ifstream(q + "/config.json"));
  cfg.erase("quantization_config");
  if (dt == DType::f32)  // (an f32 model, so that its weights are kept in f32)
    for (const char* key : {"dtype", "torch_dtype"})
      if (cfg.contains(key)) cfg[key] = "float32";
  std::ofstream(dense + "/config.json") << cfg.dump(2);
  return rounded;
}

}  // namespace

// Under LINNET_QUANT_ROUNDING=f32: the bf16 W4A16 checkpoint gives the logits of its dense twin
// of unrounded (f32) weights, and not those of its twin of bf16-rounded weights.
void expect_unrounded_twin_logits() {
  const ModelConfig c = load_hf_config(std::string(LINNET_SOURCE_DIR) + "/tests/fixtures/quantize/ct_w4a16_f32_source");
  ScratchDir d;
  write_random_checkpoint(c, d / "src", DType::bf16, 3);
  QuantizeOptions o;
  o.scheme = "w4a16";
  o.group = 16;
  quantize_checkpoint(d / "src", d / "q", o);
  write_dense_twin(d / "q", d / "f32", DType::f32);
  write_dense_twin(d / "q", d / "bf16", DType::bf16);
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  RunOptions ro;
  ro.batch = 1;
  ro.max_seq = 16;
  const Tensor tokens = Tensor::from_ints({1, 6}, {1, 5, 9, 77, 3, 120});
  auto logits = [&](const std::string& dir) { return load_model(dir, ro, *be, comm).model->forward(tokens); };
  // (The bf16 model returns its logits in bf16, an f32 twin in f32: the same f32 logits rounded once.)
  const Tensor a = logits(d / "q"), unrounded = logits(d / "f32").to(a.dtype()), rounded = logits(d / "bf16");
  ASSERT_EQ(a.nbytes(), unrounded.nbytes());
  ASSERT_EQ(a.nbytes(), rounded.nbytes());
  EXPECT_EQ(std::memcmp(a.data(), unrounded.data(), a.nbytes()), 0) << "not the logits of the unrounded twin";
  EXPECT_NE(std::memcmp(a.data(), rounded.data(), a.nbytes()), 0) << "the bf16-rounded twin's logits too";
}

TEST(QuantizedRounding, A16BitW4a16CheckpointIsTheDenseCheckpointOfItsRoundedWeights) {
  const ModelConfig c = load_hf_config(std::string(LINNET_SOURCE_DIR) + "/tests/fixtures/quantize/ct_w4a16_f32_source");
  for (DType dt : {DType::bf16, DType::f16}) {
    ScratchDir d;
    write_random_checkpoint(c, d / "src", dt, 3);
    QuantizeOptions o;
    o.scheme = "w4a16";
    o.group = 16;
    quantize_checkpoint(d / "src", d / "q", o);
    // (The rounding is not idle: many of the weights' exact products need more bits than dt has.)
    EXPECT_GT(write_dense_twin(d / "q", d / "dense", dt), 1000) << dtype_name(dt);
    auto be = make_cpu_backend();
    SingleCommunicator comm;
    RunOptions ro;
    ro.batch = 2;
    ro.max_seq = 32;
    LoadedModel quantized = load_model(d / "q", ro, *be, comm), dense = load_model(d / "dense", ro, *be, comm);
    const Tensor tokens = Tensor::from_ints({2, 9}, {1, 5, 9, 77, 3, 120, 64, 2, 8, 11, 0, 33, 100, 7, 7, 90, 15, 4});
    const Tensor a = quantized.model->forward(tokens), b = dense.model->forward(tokens);
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0)
        << dtype_name(dt) << ": the quantized model's logits are not the dense twin's";
  }
}

// LINNET_QUANT_ROUNDING=f32 keeps every dequantized weight in f32: the bf16 checkpoint then gives
// the bits of the dense twin of its unrounded weights. Another value is refused by name. (The
// switch is read once a process: the checks run in a child.)
TEST(QuantizedRounding, TheF32SwitchKeepsTheWeightsUnrounded) {
  const char* v = std::getenv("LINNET_QUANT_ROUNDING");
  if (v && (std::string(v) == "f32" || std::string(v) == "bogus")) {
    expect_unrounded_twin_logits();  // (bogus: throws at load)
    return;
  }
  const std::string self = "QuantizedRounding.TheF32SwitchKeepsTheWeightsUnrounded";
  auto [code, out] = testutil::run_self("LINNET_QUANT_ROUNDING", "f32", self);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
  std::tie(code, out) = testutil::run_self("LINNET_QUANT_ROUNDING", "bogus", self);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("LINNET_QUANT_ROUNDING=bogus: expected format or f32"), std::string::npos) << out;
}
