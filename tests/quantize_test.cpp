// linnet quantize (issue 37): from the fixtures' unquantized models it must write what the
// reference quantizer wrote for transformers — tensor for tensor, byte for byte — so its output
// is a checkpoint transformers 5.24 loads and tests/conformance_test.cpp runs (fp8_block*).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "architectures/hf_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "core/error.h"
#include "runtime/quantize_checkpoint.h"
#include "runtime/write_checkpoint.h"

using namespace linnet;
using linnet::testutil::error_of;
using linnet::testutil::ScratchDir;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kFixtures = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures";

json config_of(const fs::path& dir) { return json::parse(std::ifstream(dir / "config.json")); }

// Every tensor of `got` is `want`'s: names, dtypes, shapes and bytes.
void expect_same_tensors(const std::string& got, const std::string& want) {
  const SafetensorsFile g(got), w(want);
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  ASSERT_EQ(sorted(g.names()), sorted(w.names()));
  for (const std::string& n : w.names()) {
    const Tensor a = g.read(n), b = w.read(n);
    EXPECT_EQ(a.dtype(), b.dtype()) << n;
    EXPECT_EQ(a.shape(), b.shape()) << n;
    ASSERT_EQ(a.nbytes(), b.nbytes()) << n;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << n;
  }
}

}  // namespace

TEST(Quantize, Fp8BlocksAreTheReferenceQuantizersBytes) {
  for (const char* name : {"fp8_block", "fp8_block_f32"}) {
    SCOPED_TRACE(name);
    ScratchDir d;
    const std::string out = d / "out";
    QuantizeOptions o;
    o.block_rows = 8;
    o.block_cols = 16;
    quantize_checkpoint((kFixtures / "quantize" / (std::string(name) + "_source")).string(), out, o);
    expect_same_tensors(out + "/model.safetensors", (kFixtures / "golden" / name / "model.safetensors").string());
    EXPECT_EQ(config_of(out)["quantization_config"], config_of(kFixtures / "golden" / name)["quantization_config"]);
  }
  // A hybrid (issue 40): Qwen3.5's Gated DeltaNet projections and gated q_proj too, in blocks of [2, 2].
  ScratchDir d;
  const std::string out = d / "out";
  QuantizeOptions o;
  o.block_rows = 2;
  o.block_cols = 2;
  quantize_checkpoint((kFixtures / "quantize/fp8_qwen3_5_f32_source").string(), out, o);
  expect_same_tensors(out + "/model.safetensors", (kFixtures / "golden/fp8_qwen3_5_f32/model.safetensors").string());
  EXPECT_EQ(config_of(out)["quantization_config"], config_of(kFixtures / "golden/fp8_qwen3_5_f32")["quantization_config"]);
}

// compressed-tensors' W4A16 and W4A16_ASYM as compressed-tensors 0.20.1 writes them (min-max
// scales, and zero points, per group of 16, round half to even): weight_packed, weight_scale,
// weight_zero_point, weight_shape and the rest, byte for byte, and the quantization_config its
// update_config writes (the fixtures ct_w4a16_f32 and ct_w4a16_asym_f32 are its output on these
// sources).
TEST(Quantize, W4a16IsCompressedTensorsBytes) {
  ScratchDir d;
  QuantizeOptions o;
  o.group = 16;
  for (const std::string scheme : {"w4a16", "w4a16-asym"}) {
    const std::string fixture = scheme == "w4a16" ? "ct_w4a16_f32" : "ct_w4a16_asym_f32", out = d / scheme;
    o.scheme = scheme;
    quantize_checkpoint((kFixtures / "quantize" / (fixture + "_source")).string(), out, o);
    expect_same_tensors(out + "/model.safetensors", (kFixtures / "golden" / fixture / "model.safetensors").string());
    EXPECT_EQ(config_of(out)["quantization_config"], config_of(kFixtures / "golden" / fixture)["quantization_config"])
        << scheme;
  }
  {  // asymmetric: zero points go eight rows to a word, so k_proj's 2 heads × 6 = 12 rows are refused
    ModelConfig c = load_hf_config((kFixtures / "quantize/ct_w4a16_f32_source").string());
    c.kv_heads = 2;
    c.head_size = 6;
    write_random_checkpoint(c, d / "rows12", DType::f32, 1);
    o.scheme = "w4a16-asym";
    const std::string e = error_of([&] { quantize_checkpoint(d / "rows12", d / "rows12_q", o); });
    EXPECT_NE(e.find("tensor 'model.layers.0.self_attn.k_proj.weight' [12, 64] has rows that are not whole words of 8"),
              std::string::npos)
        << e;
    EXPECT_FALSE(fs::exists(d / "rows12_q")) << "nothing written before the refusal";
  }
  o.scheme = "w4a16";
  o.group = 48;  // 64 columns are not whole groups of 48
  const std::string e = error_of([&] { quantize_checkpoint((kFixtures / "quantize/ct_w4a16_f32_source").string(), d / "b", o); });
  EXPECT_NE(e.find("tensor 'model.layers.0.mlp.down_proj.weight' [64, 128] is not whole groups of 48"), std::string::npos)
      << e;
  o.group = 12;
  EXPECT_NE(error_of([&] { quantize_checkpoint((kFixtures / "quantize/ct_w4a16_f32_source").string(), d / "c", o); })
                .find("--group 12 must be a positive multiple of 8"),
            std::string::npos);
}

// llm-compressor's FP8_DYNAMIC and W8A8 schemes: a scale a row, written as compressed-tensors
// 0.20.1 writes them (the fixtures ct_fp8_dynamic_f32 and ct_w8a8_f32 are its output on these
// sources), with the activations' dynamic per-token rounding in the config.
TEST(Quantize, Fp8ChannelAndW8a8AreCompressedTensorsBytes) {
  for (const auto& [scheme, fixture] : {std::pair<std::string, std::string>{"fp8-channel", "ct_fp8_dynamic_f32"},
                                        std::pair<std::string, std::string>{"w8a8", "ct_w8a8_f32"}}) {
    ScratchDir d;
    const std::string out = d / "out";
    QuantizeOptions o;
    o.scheme = scheme;
    quantize_checkpoint((kFixtures / "quantize" / (fixture + "_source")).string(), out, o);
    expect_same_tensors(out + "/model.safetensors", (kFixtures / "golden" / fixture / "model.safetensors").string());
    EXPECT_EQ(config_of(out)["quantization_config"], config_of(kFixtures / "golden" / fixture)["quantization_config"])
        << scheme;
  }
}

TEST(Quantize, RefusesWhatItCannotWriteByName) {
  const std::string src = (kFixtures / "quantize/fp8_block_source").string();
  ScratchDir d;
  QuantizeOptions o;
  o.block_rows = 16;
  o.block_cols = 48;  // 64 columns are not whole blocks of 48
  std::string e = error_of([&] { quantize_checkpoint(src, d / "a", o); });
  EXPECT_NE(e.find("tensor 'model.layers.0.mlp.down_proj.weight' [64, 128] is not whole blocks of 16×48"),
            std::string::npos)
      << e;
  o = QuantizeOptions{};
  o.scheme = "nvfp4";
  e = error_of([&] { quantize_checkpoint(src, d / "b", o); });
  EXPECT_NE(e.find("scheme 'nvfp4' is not one linnet writes (schemes: fp8-block, fp8-channel, w8a8, w4a16, w4a16-asym)"),
            std::string::npos)
      << e;
  e = error_of([&] { quantize_checkpoint((kFixtures / "golden/fp8_block").string(), d / "c", QuantizeOptions{}); });
  EXPECT_NE(e.find("already quantized (quantization_config fp8 8×16"), std::string::npos) << e;
  // A multimodal checkpoint (its text model dense): refused, not half-written.
  fs::create_directories(d / "mm");
  std::ofstream(d / "mm/config.json") << R"({"model_type": "mistral3", "text_config": {"model_type": "mistral",
    "vocab_size": 32, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32, "num_hidden_layers": 1}})";
  e = error_of([&] { quantize_checkpoint(d / "mm", d / "mm_out", QuantizeOptions{}); });
  EXPECT_NE(e.find("a mistral3 multimodal checkpoint (its text model: mistral); linnet quantize reads text checkpoints"),
            std::string::npos)
      << e;
  fs::create_directories(d / "full");
  std::ofstream(d / "full/x") << "x";
  e = error_of([&] { quantize_checkpoint(src, d / "full", QuantizeOptions{}); });
  EXPECT_NE(e.find("exists and is not empty"), std::string::npos) << e;
}

TEST(Quantize, CommandLineWritesALoadableCheckpoint) {
  ScratchDir d;
  const std::string bin = LINNET_BINARY, src = (kFixtures / "quantize/fp8_block_source").string();
  auto run = [&](const std::string& args) {
    FILE* p = popen((bin + " " + args + " 2>&1").c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    return std::pair<int, std::string>{WEXITSTATUS(pclose(p)), out};
  };
  auto [code, out] = run("quantize --checkpoint " + src + " --out " + (d / "q") + " --block 8,16");
  ASSERT_EQ(code, 0) << out;
  std::tie(code, out) = run("inspect --checkpoint " + (d / "q") + " --shards 2 --backend cpu");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("stored fp8 8×16"), std::string::npos) << out;
  std::tie(code, out) = run("quantize --checkpoint " + src + " --out " + (d / "r") + " --block 8x16");
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("--block '8x16' must be rows,cols"), std::string::npos) << out;
  std::tie(code, out) = run("pack --checkpoint " + (d / "q"));
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("is quantized; its matrices are read as stored, not packed"), std::string::npos) << out;
}
