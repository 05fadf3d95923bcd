// FP8 E4M3 weights with block scales (issue 37): the dtype's conversions, the CPU kernels
// against the dense product on the dequantized matrix, quantization_config's reading, and the
// refusals of bad checkpoints. Whole models against transformers: tests/conformance_test.cpp
// (fixtures fp8_block, fp8_block_f32 at Shards 1, 2 and 4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "architectures/hf_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "fixture_edit_util.h"
#include "core/backend.h"
#include "core/cpu/packed_matmul.h"
#include "core/profiling_backend.h"
#include "layers/footprint.h"
#include "layers/generics.h"
#include "layers/parameters.h"
#include "parallel/communicator.h"
#include "runtime/loader.h"

using namespace linnet;
using linnet::testutil::error_of;
using linnet::testutil::ScratchDir;
using linnet::testutil::edited_fixture;
using linnet::testutil::load_error;
using linnet::testutil::read_text;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kFixture = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden/fp8_block_f32";

// A [rows, cols] matrix quantized as the fixtures' generator does: per br × bc block,
// scale = amax / 448, q = e4m3(w / scale). Returns q, the scales and the dequantized f32 matrix.
struct Quantized {
  Tensor q, scales, dequantized;
};
Quantized quantize(int64_t rows, int64_t cols, int64_t br, int64_t bc, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < w.size(); ++i) w[i] = nd(rng) * (1.0f + static_cast<float>(i % 7));  // uneven blocks
  const int64_t nr = (rows + br - 1) / br, nc = (cols + bc - 1) / bc;
  Quantized out{Tensor::empty({rows, cols}, DType::f8_e4m3), Tensor::empty({nr, nc}, DType::f32),
                Tensor::empty({rows, cols}, DType::f32)};
  for (int64_t b = 0; b < nr * nc; ++b) {
    const int64_t r0 = b / nc * br, c0 = b % nc * bc;
    float amax = 0;
    for (int64_t r = r0; r < std::min(rows, r0 + br); ++r)
      for (int64_t c = c0; c < std::min(cols, c0 + bc); ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
    const float s = amax > 0 ? amax / 448.0f : 1.0f;
    out.scales.ptr<float>()[b] = s;
    for (int64_t r = r0; r < std::min(rows, r0 + br); ++r)
      for (int64_t c = c0; c < std::min(cols, c0 + bc); ++c) {
        const uint8_t q = f32_to_f8_e4m3(w[r * cols + c] / s);
        out.q.ptr<uint8_t>()[r * cols + c] = q;
        out.dequantized.ptr<float>()[r * cols + c] = f8_e4m3_to_f32(q) * s;
      }
  }
  return out;
}

}  // namespace

TEST(Fp8, E4m3ValuesAndRoundingAreTheFormats) {
  // Every code: sign, 4 exponent bits of bias 7, 3 mantissa bits; S.1111.111 is NaN.
  for (int b = 0; b < 256; ++b) {
    const int e = (b >> 3) & 15, m = b & 7;
    const float v = f8_e4m3_to_f32(static_cast<uint8_t>(b));
    if (e == 15 && m == 7) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    const double want = (b & 0x80 ? -1 : 1) * (e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7));
    EXPECT_EQ(v, static_cast<float>(want)) << b;
    if (b != 0x80) {
      EXPECT_EQ(f32_to_f8_e4m3(v), b) << b;  // -0 → 0x80 too
    }
  }
  EXPECT_EQ(f8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(f32_to_f8_e4m3(1.0625f), 0x38);  // halfway between 1 and 1.125: to the even code (1)
  EXPECT_EQ(f32_to_f8_e4m3(1.1875f), 0x3a);  // halfway between 1.125 and 1.25: to 1.25
  EXPECT_EQ(f32_to_f8_e4m3(1e9f), 0x7e);     // saturates at 448
  EXPECT_EQ(f32_to_f8_e4m3(-1e9f), 0xfe);
  EXPECT_EQ(f32_to_f8_e4m3(std::ldexp(1.0f, -11)), 0x00);  // a quarter of the smallest subnormal: 0
  // Against the definition (the nearest finite code, ties to the even one, saturating at 448) on
  // every code's neighbours, every midpoint between codes and a spread of random values.
  auto nearest = [](float x) {
    const float a = std::min(std::fabs(x), 448.0f);
    int best = 0;
    for (int c = 1; c <= 0x7e; ++c) {
      const float d = std::fabs(f8_e4m3_to_f32(static_cast<uint8_t>(c)) - a),
                  db = std::fabs(f8_e4m3_to_f32(static_cast<uint8_t>(best)) - a);
      if (d < db || (d == db && c % 2 == 0)) best = c;
    }
    return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | best);
  };
  std::vector<float> probes = {0.0f, -0.0f, 448.0f, 449.0f, 464.0f, 1e-30f, 0x1p-6f, 0x1p-10f, 3 * 0x1p-11f};
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = f8_e4m3_to_f32(static_cast<uint8_t>(c)), hi = f8_e4m3_to_f32(static_cast<uint8_t>(c + 1));
    for (float v : {lo, hi, (lo + hi) / 2, std::nextafter((lo + hi) / 2, 0.0f), std::nextafter((lo + hi) / 2, 1e9f)})
      probes.push_back(v), probes.push_back(-v);
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> e(-14.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) probes.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(e(rng)));
  for (const float v : probes) ASSERT_EQ(f32_to_f8_e4m3(v), nearest(v)) << v;
  EXPECT_EQ(parse_dtype("F8_E4M3"), DType::f8_e4m3);
  EXPECT_EQ(dtype_size(DType::f8_e4m3), 1u);
  const uint8_t with_nan[] = {0x38, 0x7f, 0x01};
  EXPECT_EQ(first_non_finite(with_nan, DType::f8_e4m3, 3), 1);
  EXPECT_EQ(first_non_finite(with_nan, DType::f8_e4m3, 1), -1);
}

// Each kernel's product of FP8 weights is the f32 kernel's on the dequantized matrix, bit for
// bit: whatever the rows of x, a view starting inside a panel, a block width that does not
// divide k, block heights below and above a panel.
TEST(Fp8, EveryKernelGivesTheDenseProductOnTheDequantizedWeights) {
  auto be = make_cpu_backend();
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  struct Case {
    int64_t in, br, bc;
  };
  for (const Case c : {Case{37, 1, 37}, Case{128, 8, 16}, Case{100, 64, 48}, Case{16, 128, 128}, Case{257, 3, 5}}) {
    const int64_t o = 45, row0 = 7, rows = 29;
    const Quantized w = quantize(o, c.in, c.br, c.bc, static_cast<uint32_t>(c.in));
    const Tensor fp8 = be->upload_quantized_matrix({{w.q, w.scales, {}, 0}}, WeightLayout::fp8_blocks(c.br, c.bc));
    EXPECT_EQ(fp8.dtype(), DType::f8_e4m3);
    EXPECT_EQ(fp8.shape(), (Shape{o, c.in}));
    const Tensor dense = be->upload_matrix(w.dequantized);
    std::vector<float> row(static_cast<size_t>(rows * c.in));
    cpu::unpack_rows_fp8_f32(fp8.storage()->data, fp8.storage()->packed_rows, c.in, c.bc, row0, rows, row.data());
    EXPECT_EQ(row, w.dequantized.rows(row0, row0 + rows).to_floats()) << "in " << c.in;
    const int64_t n_max = 40;
    std::vector<float> xf(static_cast<size_t>(n_max * c.in));
    for (auto& v : xf) v = nd(rng);
    const Tensor x = Tensor::from_floats({n_max, c.in}, xf);
    for (int64_t n : {1, 3, 12, 13, 40})
      for (const char* k : cpu::packed_matmul_kernels()) {
        if (std::string(k) == "scalar" && n > 3) continue;  // slow; its bits are checked at n ≤ 3
        Tensor got = Tensor::empty({n, rows}, DType::f32), want = Tensor::empty({n, rows}, DType::f32);
        cpu::packed_matmul_fp8(x.ptr<float>(), n, c.in, fp8.storage()->data, fp8.storage()->packed_rows, c.bc, row0, rows,
                               got.ptr<float>(), k);
        cpu::packed_matmul(x.ptr<float>(), n, c.in, dense.storage()->data, DType::f32, row0, rows, want.ptr<float>(), k);
        ASSERT_EQ(got.to_floats(), want.to_floats()) << "kernel " << k << " n " << n << " in " << c.in;
      }
    // Through the backend's matmul, on a view of rows, with a bias: as the dense matrix.
    Tensor got = Tensor::empty({5, rows}, DType::f32), want = Tensor::empty({5, rows}, DType::f32);
    const Tensor bias = Tensor::from_floats({rows}, std::vector<float>(static_cast<size_t>(rows), 0.5f));
    be->matmul(x.rows(0, 5), fp8.rows(row0, row0 + rows), &bias, got);
    be->matmul(x.rows(0, 5), dense.rows(row0, row0 + rows), &bias, want);
    EXPECT_EQ(got.to_floats(), want.to_floats()) << "in " << c.in;
  }
}

// Fused matrices (q|k|v, gate|up) stack their parts' rows, each with its own scales.
TEST(Fp8, StackedPartsKeepTheirOwnScales) {
  auto be = make_cpu_backend();
  const Quantized a = quantize(24, 64, 8, 16, 1), b = quantize(40, 64, 8, 16, 2);
  const Tensor fp8 = be->upload_quantized_matrix({{a.q, a.scales, {}, 0}, {b.q, b.scales, {}, 0}}, WeightLayout::fp8_blocks(8, 16));
  const Tensor dense = be->upload_matrix(stack_rows({a.dequantized, b.dequantized}));
  const Tensor x = Tensor::from_floats({3, 64}, std::vector<float>(192, 0.25f));
  Tensor got = Tensor::empty({3, 64}, DType::f32), want = Tensor::empty({3, 64}, DType::f32);
  be->matmul(x, fp8, nullptr, got);
  be->matmul(x, dense, nullptr, want);
  EXPECT_EQ(got.to_floats(), want.to_floats());
  // The profiling wrapper (bench) hands it to the backend it wraps.
  ProfilingBackend profiled(*be);
  EXPECT_TRUE(profiled.supports(WeightFormat::fp8));
  Tensor again = Tensor::empty({3, 64}, DType::f32);
  profiled.matmul(x, profiled.upload_quantized_matrix({{a.q, a.scales, {}, 0}, {b.q, b.scales, {}, 0}}, WeightLayout::fp8_blocks(8, 16)),
                  nullptr, again);
  EXPECT_EQ(again.to_floats(), want.to_floats());
  // Held as stored: a byte a weight and an f32 scale per row and column block, not f32 weights.
  EXPECT_EQ(fp8.storage()->bytes, cpu::packed_fp8_bytes(64, 64, 16));
  EXPECT_LT(fp8.storage()->bytes, dense.storage()->bytes / 3);
}

TEST(Fp8, UploadRefusesScalesOfAnotherShapeAndValuesOfAnotherDtype) {
  auto be = make_cpu_backend();
  const Quantized a = quantize(16, 32, 8, 16, 3);
  std::string e = error_of([&] { be->upload_quantized_matrix({{a.q, a.scales, {}, 0}}, WeightLayout::fp8_blocks(16, 16)); });
  EXPECT_NE(e.find("scales f32 [1, 2]"), std::string::npos) << e;
  e = error_of([&] { be->upload_quantized_matrix({{a.dequantized, a.scales, {}, 0}}, WeightLayout::fp8_blocks(8, 16)); });
  EXPECT_NE(e.find("f8_e4m3 row-major"), std::string::npos) << e;
}

TEST(Fp8, QuantizationConfigIsReadOrRefusedByName) {
  json j = json::parse(read_text(kFixture / "config.json"));
  ModelConfig c = parse_hf_config(j, "cfg");
  ASSERT_TRUE(c.quantization);
  EXPECT_EQ(c.quantization->method, "fp8");
  EXPECT_EQ(c.quantization->matrices.describe(), "fp8 8×16");
  EXPECT_EQ(c.quantization->matrices.scale_suffix, "_scale_inv");
  // The linear layers' matrices are stored FP8 with their scales; embeddings, norms, lm_head not.
  const Generics g = bind_generics(c, RunOptions{1, 32, 2, 8, std::nullopt});
  int quantized = 0;
  for (const ParamSpec& p : parameter_specs(c, g)) {
    const bool linear = p.hf_name.find("_proj.weight") != std::string::npos;
    EXPECT_EQ(!p.layout.dense(), linear) << p.hf_name;
    if (!linear) continue;
    ++quantized;
    EXPECT_EQ(p.dtype, DType::f8_e4m3);
    ASSERT_EQ(p.companions().size(), 1u);
    EXPECT_EQ(p.companions()[0].hf_name, p.hf_name + "_scale_inv");
  }
  EXPECT_EQ(quantized, 14);

  auto refused = [&](const std::function<void(json&)>& edit) {
    json k = j;
    edit(k["quantization_config"]);
    return error_of([&] { parse_hf_config(k, "cfg"); });
  };
  std::string e = refused([](json& q) { q = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}}; });
  EXPECT_NE(e.find("quant_method 'bitsandbytes' is not supported yet"), std::string::npos) << e;
  e = refused([](json& q) { q["activation_scheme"] = "static"; });
  EXPECT_NE(e.find("activation_scheme 'static'"), std::string::npos) << e;
  e = refused([](json& q) { q["weight_block_size"] = {128}; });
  EXPECT_NE(e.find("weight_block_size must be [rows, cols]"), std::string::npos) << e;
  e = refused([](json& q) { q["weight_block_size"] = {0, 128}; });
  EXPECT_NE(e.find("weight_block_size must be [rows, cols]"), std::string::npos) << e;
  e = refused([](json& q) { q["weight_block_size"] = nullptr; });
  EXPECT_NE(e.find("one scale per tensor"), std::string::npos) << e;
  e = refused([](json& q) { q.erase("quant_method"); });
  EXPECT_NE(e.find("no quant_method"), std::string::npos) << e;
  e = refused([](json& q) { q["modules_to_not_convert"] = "lm_head"; });
  EXPECT_NE(e.find("modules_to_not_convert must be a list"), std::string::npos) << e;

  // modules_to_not_convert as transformers matches it: from the start to a module boundary (a
  // regular expression), or the name's end.
  Quantization q = *c.quantization;
  q.not_converted = {"model.layers.1", "o_proj", "model.layers.0.mlp.(gate|up)_proj"};
  EXPECT_FALSE(q.converts("model.layers.1.mlp.down_proj"));
  EXPECT_TRUE(q.converts("model.layers.11.mlp.down_proj"));
  EXPECT_FALSE(q.converts("model.layers.0.self_attn.o_proj"));
  EXPECT_FALSE(q.converts("model.layers.0.mlp.gate_proj"));
  EXPECT_TRUE(q.converts("model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(q.converts("lm_head"));
  // A pattern that is no regular expression, or one that would backtrack for ever: an error
  // naming it, not a hang.
  q.not_converted = {"model.layers.(0"};
  e = error_of([&] { q.converts("model.layers.0.mlp.up_proj"); });
  EXPECT_NE(e.find("the module pattern 'model.layers.(0' is not a regular expression"), std::string::npos) << e;
  q.not_converted = {"(.|.)*j$"};
  e = error_of([&] { q.converts("model.layers.0.self_attn.q_proj_and_a_long_tail_of_characters"); });
  EXPECT_NE(e.find("cannot be matched against"), std::string::npos) << e;
}

// A split that would cut a block is refused before anything is read, naming tensor and block.
TEST(Fp8, ASliceThatCutsABlockIsRefusedNamingTheTensor) {
  json j = json::parse(read_text(kFixture / "config.json"));
  j["quantization_config"]["weight_block_size"] = {16, 16};  // k_proj: 32 rows, 8 a shard at Shards 4
  const ModelConfig c = parse_hf_config(j, "cfg");
  const auto cpu_supports = [](WeightFormat f) { return f == WeightFormat::dense || f == WeightFormat::fp8; };
  EXPECT_NO_THROW(check_weight_layouts(parameter_specs(c, bind_generics(c, RunOptions{1, 32, 2, 8, std::nullopt})), 2,
                                       cpu_supports, "cpu"));
  const std::string e = error_of([&] {
    check_weight_layouts(parameter_specs(c, bind_generics(c, RunOptions{1, 32, 4, 8, std::nullopt})), 4, cpu_supports, "cpu");
  });
  EXPECT_NE(e.find("model.layers.0.self_attn.k_proj.weight: the slice [0, 8) of dimension 0 (rows)"), std::string::npos)
      << e;
  EXPECT_NE(e.find("cuts a block of 16 (fp8 16×16 blocks)"), std::string::npos) << e;
}

TEST(Fp8, BadCheckpointsAreRefusedNamingFileTensorAndRule) {
  SafetensorsFile f((kFixture / "model.safetensors").string());
  const std::string scale = "model.layers.1.mlp.down_proj.weight_scale_inv", weight = "model.layers.0.self_attn.k_proj.weight";
  {  // a NaN scale
    ScratchDir d;
    Tensor s = f.read(scale);
    s.ptr<float>()[3] = std::numeric_limits<float>::quiet_NaN();
    edited_fixture(kFixture, d, [](json&) {}, {{scale, s}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor '" + scale + "' holds NaN at [0, 3]"), std::string::npos) << e;
  }
  {  // a NaN weight (E4M3's S.1111.111)
    ScratchDir d;
    Tensor w = f.read(weight);
    w.ptr<uint8_t>()[70] = 0xff;
    edited_fixture(kFixture, d, [](json&) {}, {{weight, w}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor '" + weight + "' holds NaN at [1, 6]"), std::string::npos) << e;
  }
  {  // scales of another block size than the config's
    ScratchDir d;
    edited_fixture(kFixture, d, [](json& j) { j["quantization_config"]["weight_block_size"] = {16, 16}; });
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor 'model.layers.0.self_attn.q_proj.weight_scale_inv' has shape [8, 4], expected [4, 4]"),
              std::string::npos)
        << e;
  }
  {  // a quantized layer stored in bf16
    ScratchDir d;
    edited_fixture(kFixture, d, [](json&) {}, {{weight, f.read(weight).to(DType::bf16)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor '" + weight + "' is stored as bf16, but quantization_config (fp8 8×16) stores it as f8_e4m3"),
              std::string::npos)
        << e;
  }
  {  // q_proj left unconverted while k/v are FP8: one fused matrix cannot mix them (never a
     // silent widening of FP8 bytes without their scales)
    ScratchDir d;
    edited_fixture(kFixture, d, [](json& j) {
      j["quantization_config"]["modules_to_not_convert"] = {"lm_head", "model.layers.0.self_attn.q_proj"};
    });
    const std::string e = load_error(d);
    EXPECT_NE(e.find("model.layers.0.self_attn.q_proj.weight is stored dense, but "
                     "model.layers.0.self_attn.k_proj.weight (one matrix with it) fp8 8×16"),
              std::string::npos)
        << e;
  }
  {  // random weights for an FP8 config: refused, saying how to get FP8 weights
    auto be = make_cpu_backend();
    SingleCommunicator comm;
    const std::string e =
        error_of([&] { random_model(load_hf_config(kFixture.string()), RunOptions{}, *be, comm); });
    EXPECT_NE(e.find("random weights are dense, but this config has quantization_config (fp8 8×16"), std::string::npos)
        << e;
  }
  {  // FP8 values with no quantization_config
    ScratchDir d;
    edited_fixture(kFixture, d, [](json& j) { j.erase("quantization_config"); });
    const std::string e = load_error(d);
    EXPECT_NE(e.find("has dtype f8_e4m3, expected a float dtype"), std::string::npos) << e;
  }
}

// The loaded model holds its FP8 matrices as stored: the footprint counts a byte a weight and
// the scales, and the model computes what the dequantized dense model does.
TEST(Fp8, TheFootprintCountsStoredBytes) {
  const ModelConfig c = load_hf_config(kFixture.string());
  const Generics g = bind_generics(c, RunOptions{1, 32, 1, 8, std::nullopt});
  for (const ParamSpec& p : parameter_specs(c, g)) {
    if (p.layout.dense()) continue;
    const Shape s = p.shard_shape();
    const int64_t scales = ((s[0] + 7) / 8) * ((s[1] + 15) / 16) * 4;
    EXPECT_EQ(held_bytes(c, p, DType::f32, DType::f32), s.numel() + scales) << p.hf_name;
  }
}

// compressed-tensors' float-quantized FP8 (llm-compressor): weights per channel or per block,
// activations rounded to FP8 per token or per group; read, or refused by name.
TEST(Fp8, CompressedTensorsConfigIsReadOrRefusedByName) {
  const fs::path golden = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden";
  const json dyn = json::parse(read_text(golden / "ct_fp8_dynamic_f32/config.json"));
  const ModelConfig c = parse_hf_config(dyn, "cfg");
  ASSERT_TRUE(c.quantization);
  EXPECT_EQ(c.quantization->matrices.describe(), "fp8 per channel, activations fp8 per token");
  EXPECT_EQ(c.quantization->matrices.scale_suffix, "_scale");
  const ModelConfig b = parse_hf_config(json::parse(read_text(golden / "ct_fp8_block_f32/config.json")), "cfg");
  EXPECT_EQ(b.quantization->matrices.describe(), "fp8 8×16, activations fp8 per group of 16");
  // ignore: whole module names, or "re:" and a regular expression from the name's start.
  Quantization q = *c.quantization;
  q.not_converted = {"model.layers.0.mlp.down_proj", "re:.*self_attn\\.(q|k)_proj"};
  EXPECT_FALSE(q.converts("model.layers.0.mlp.down_proj"));
  EXPECT_TRUE(q.converts("model.layers.1.mlp.down_proj"));
  EXPECT_TRUE(q.converts("model.layers.0.mlp"));  // not a prefix match
  EXPECT_FALSE(q.converts("model.layers.1.self_attn.k_proj"));
  EXPECT_TRUE(q.converts("model.layers.1.self_attn.v_proj"));

  auto refused = [&](const std::function<void(json&)>& edit) {
    json k = dyn;
    edit(k["quantization_config"]);
    return error_of([&] { parse_hf_config(k, "cfg"); });
  };
  std::string e = refused([](json& q) { q["format"] = "marlin-24"; });
  EXPECT_NE(e.find("format 'marlin-24' is not supported yet"), std::string::npos) << e;
  e = refused([](json& q) {  // FP8 weights said to be integers
    q["format"] = q["config_groups"]["group_0"]["format"] = "int-quantized";
  });
  EXPECT_NE(e.find("weights.type is \"float\"; linnet reads \"int\""), std::string::npos) << e;
  e = refused([](json& q) { q["config_groups"]["group_0"]["weights"]["num_bits"] = 4; });
  EXPECT_NE(e.find("config_groups.group_0.weights.num_bits is 4; linnet reads 8"), std::string::npos) << e;
  e = refused([](json& q) { q["config_groups"]["group_0"]["weights"]["strategy"] = "group"; });
  EXPECT_NE(e.find("weights.strategy 'group' is not supported yet (linnet reads tensor, channel and block)"),
            std::string::npos)
      << e;
  // Static activations are read per tensor only (the FP8 scheme's): a static per-token one is refused.
  e = refused([](json& q) { q["config_groups"]["group_0"]["input_activations"]["dynamic"] = false; });
  EXPECT_NE(e.find("input_activations.strategy is \"token\"; linnet reads \"tensor\""), std::string::npos) << e;
  e = refused([](json& q) { q["config_groups"]["group_0"]["targets"] = {"LlamaAttention"}; });
  EXPECT_NE(e.find("config_groups.group_0.targets holds 'LlamaAttention': linnet reads the targets Linear, re: "
                   "patterns and module names"),
            std::string::npos)
      << e;
  e = refused([](json& q) { q["kv_cache_scheme"] = {{"num_bits", 8}}; });
  EXPECT_NE(e.find("kv_cache_scheme is not supported"), std::string::npos) << e;
  e = refused([](json& q) { q["quantization_status"] = "frozen"; });
  EXPECT_NE(e.find("quantization_status is \"frozen\""), std::string::npos) << e;
}

// compressed-tensors' config groups, each for its targets: a module takes the scheme of its most
// specific target (its whole name, then re: patterns in sorted order, then the class Linear), as
// apply_quantization_config does; a module no target names stays dense; stacked parts (q|k|v)
// stored unalike are refused by name. Whole model: fixture ct_mixed_f32 (tests/conformance_test.cpp).
TEST(Fp8, CompressedTensorsConfigGroupsEachTakeTheirTargets) {
  const fs::path golden = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden";
  const json mixed = json::parse(read_text(golden / "ct_mixed_f32/config.json"));
  const ModelConfig c = parse_hf_config(mixed, "cfg");
  ASSERT_TRUE(c.quantization);
  const Quantization& q = *c.quantization;
  ASSERT_EQ(q.schemes.size(), 2u);
  auto layout = [&](const std::string& m) {
    const WeightLayout* l = q.layout_of(m);
    return l ? l->describe() : std::string("dense");
  };
  EXPECT_EQ(layout("model.layers.0.self_attn.q_proj"), "fp8 per channel, activations fp8 per token");
  EXPECT_EQ(layout("model.layers.1.self_attn.o_proj"), "fp8 per channel, activations fp8 per token");
  EXPECT_EQ(layout("model.layers.0.mlp.down_proj"), "int4 groups of 16");
  EXPECT_EQ(layout("lm_head"), "dense");
  EXPECT_NE(q.describe().find("re:.*self_attn\\..*: fp8 per channel"), std::string::npos) << q.describe();

  // Precedence: a whole name before patterns, patterns alphabetically, Linear last; a module
  // no target names is not converted.
  Quantization p = q;
  p.schemes = {{{"re:.*mlp.*"}, WeightLayout::int4_groups(16, true)},
               {{"model.layers.0.mlp.up_proj", "re:.*down_proj"}, WeightLayout::int8_groups(WeightLayout::kWhole)},
               {{"re:.*self_attn.*"}, WeightLayout::fp8_blocks(1, WeightLayout::kWhole, "_scale")}};
  auto of = [&](const std::string& m) {
    const WeightLayout* l = p.layout_of(m);
    return l ? l->describe() : std::string("dense");
  };
  EXPECT_EQ(of("model.layers.0.mlp.up_proj"), "int8 per channel");    // its whole name, before any pattern
  EXPECT_EQ(of("model.layers.1.mlp.up_proj"), "int4 groups of 16");
  EXPECT_EQ(of("model.layers.1.mlp.down_proj"), "int8 per channel");  // "re:.*down_proj" sorts before "re:.*mlp.*"
  EXPECT_EQ(of("model.layers.1.self_attn.q_proj"), "fp8 per channel");
  EXPECT_EQ(of("model.layers.1.other"), "dense");                      // no target: not converted
  p.schemes.push_back({{"Linear"}, WeightLayout::int4_groups(32, false)});
  EXPECT_EQ(of("model.layers.1.other"), "int4 asymmetric groups of 32");
  p.not_converted = {"re:.*up_proj"};
  EXPECT_EQ(of("model.layers.0.mlp.up_proj"), "dense");                // ignore first

  // Read or refused by name.
  auto refused = [&](const std::function<void(json&)>& edit) {
    json k = mixed;
    edit(k["quantization_config"]);
    return error_of([&] { parse_hf_config(k, "cfg"); });
  };
  std::string e = refused([](json& j) { j["config_groups"]["group_1"].erase("format"); });
  EXPECT_NE(e.find("config_groups.group_1.format is missing (the config's format is mixed-precision)"), std::string::npos)
      << e;
  e = refused([](json& j) { j["config_groups"]["group_1"]["targets"] = json::array(); });
  EXPECT_NE(e.find("config_groups.group_1.targets must be a list of targets"), std::string::npos) << e;
  e = refused([](json& j) { j["config_groups"]["group_0"]["format"] = "nvfp4-pack-quantized"; });
  EXPECT_NE(e.find("config_groups.group_0.format 'nvfp4-pack-quantized' is not supported yet"), std::string::npos) << e;
  // q's group and k's differ (k stored W4A16 as its group says): q|k|v is one matrix, refused at
  // load naming both.
  {
    testutil::ScratchDir d;
    const std::string k = "model.layers.0.self_attn.k_proj.weight";
    testutil::edited_fixture(golden / "ct_mixed_f32", d, [](json& j) {
      j["quantization_config"]["config_groups"]["group_0"]["targets"] = {"re:.*self_attn\\.(q|v|o)_proj",
                                                                          "re:model\\.layers\\.1\\..*self_attn.*"};
    }, {{k + "_packed", Tensor::zeros({32, 8}, DType::i32)},
        {k + "_scale", Tensor::from_floats({32, 4}, std::vector<float>(128, 1.0f))},
        {k + "_shape", Tensor::from_ints({2}, {32, 64}, DType::i64)}});
    e = testutil::load_error(d);
    EXPECT_NE(e.find("model.layers.0.self_attn.k_proj.weight is stored int4 groups of 16, but "
                     "model.layers.0.self_attn.q_proj.weight (one matrix with it) fp8 per channel"),
              std::string::npos)
        << e;
  }
}

// Per-token activation scales span a whole row: at Shards > 1 a row-parallel layer (o_proj,
// down_proj) all-reduces its input's row amax (layers/linear.h), so the layouts check at every
// Shards; per-group activations slice with their groups, and a slice that cuts one is refused.
TEST(Fp8, CompressedTensorsActivationScalesSliceWithTheirGroups) {
  const fs::path golden = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden";
  const auto all = [](WeightFormat) { return true; };
  const ModelConfig c = load_hf_config((golden / "ct_fp8_dynamic_f32").string());
  for (int64_t s : {1, 2, 4})
    EXPECT_NO_THROW(check_weight_layouts(parameter_specs(c, bind_generics(c, RunOptions{1, 32, s, 8, std::nullopt})), s,
                                         all, "cpu"));
  ModelConfig b = load_hf_config((golden / "ct_fp8_block_f32").string());
  EXPECT_NO_THROW(check_weight_layouts(parameter_specs(b, bind_generics(b, RunOptions{1, 32, 4, 8, std::nullopt})), 4, all, "cpu"));
  b.quantization->matrices = WeightLayout::fp8_blocks(8, 16, "_scale");
  b.quantization->matrices.activations = {ActivationFormat::fp8, 32};  // o_proj's 64 columns at Shards 4: 16 a shard
  const std::string e = error_of([&] {
    check_weight_layouts(parameter_specs(b, bind_generics(b, RunOptions{1, 32, 4, 8, std::nullopt})), 4, all, "cpu");
  });
  EXPECT_NE(e.find("o_proj.weight: the column slice [0, 16) cuts a group of 32 activations that share a scale"),
            std::string::npos)
      << e;
}

// The activations' rounding: the E4M3 value nearest, ties to even, as the reference's cast.
TEST(Fp8, ActivationRoundingIsTheFormatsCast) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-448.0f, 448.0f);
  for (int i = 0; i < 200000; ++i) {
    const float v = i % 2 ? u(rng) : u(rng) * 1e-3f;
    ASSERT_EQ(cpu::round_to_e4m3(v), f8_e4m3_to_f32(f32_to_f8_e4m3(v))) << v;
  }
  for (int b = 0; b < 126; ++b) {  // every midpoint between neighbours: to the even code
    const float lo = f8_e4m3_to_f32(static_cast<uint8_t>(b)), hi = f8_e4m3_to_f32(static_cast<uint8_t>(b + 1));
    EXPECT_EQ(cpu::round_to_e4m3((lo + hi) / 2), b % 2 == 0 ? lo : hi) << b;
  }
  // A row: s = amax / 448; an all-zero group keeps zeros (scale 2^-23).
  const std::vector<float> x = {1.0f, -3.0f, 0.1f, 2.5f, 0, 0, 0, 0};
  std::vector<float> out(8);
  cpu::round_activations(x.data(), 2, 4, {ActivationFormat::fp8, -1}, out.data());
  const float s = 3.0f / 448.0f;
  for (int c = 0; c < 4; ++c) EXPECT_EQ(out[c], cpu::round_to_e4m3(x[c] / s) * s) << c;
  for (int c = 4; c < 8; ++c) EXPECT_EQ(out[c], 0.0f);
  // Static (compressed-tensors' FP8 scheme): the stored scale for every row and column, values
  // beyond 448 of it clamped, a zero row kept zero.
  ActivationRounding stat{ActivationFormat::fp8, 0};
  stat.stored = true;
  stat.scale = 0.005f;
  cpu::round_activations(x.data(), 2, 4, stat, out.data());
  for (int c = 0; c < 8; ++c)
    EXPECT_EQ(out[c], cpu::round_to_e4m3(std::clamp(x[c] / 0.005f, -448.0f, 448.0f)) * 0.005f) << c;
  EXPECT_EQ(out[1], -448.0f * 0.005f);  // −3 / 0.005 = −600: clamped
}

// compressed-tensors' FP8 scheme: one weight_scale [1] a tensor and a static input_scale [1] a
// layer (…q_proj.input_scale), every shard reading both whole. Whole model: fixture
// ct_fp8_static_f32 (tests/conformance_test.cpp) at Shards 1, 2 and 4.
TEST(Fp8, CompressedTensorsStaticActivationScalesArePerLayer) {
  const fs::path golden = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden";
  const json cfg = json::parse(read_text(golden / "ct_fp8_static_f32/config.json"));
  const ModelConfig c = parse_hf_config(cfg, "cfg");
  ASSERT_TRUE(c.quantization);
  const WeightLayout& l = c.quantization->matrices;
  EXPECT_EQ(l.describe(), "fp8 per tensor, activations fp8 static per tensor");
  const ParamSpec o = testutil::matrix_spec("model.layers.0.self_attn.o_proj.weight", {64, 64}, Split::columns, 16, l);
  const auto parts = o.companions();
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].hf_name, "model.layers.0.self_attn.o_proj.weight_scale");
  EXPECT_EQ(parts[0].full, (Shape{1}));
  EXPECT_EQ(parts[0].split, Split::mirrored);  // one scale: every shard's
  EXPECT_EQ(parts[1].hf_name, "model.layers.0.self_attn.o_proj.input_scale");
  EXPECT_EQ(parts[1].split, Split::mirrored);
  EXPECT_NO_THROW(o.check_blocks(4));  // no block or group for a slice to cut
  EXPECT_EQ(l.bytes({64, 64}, DType::f32), 64 * 64 + 4 + 4);

  auto refused = [&](const std::function<void(json&)>& edit) {
    json k = cfg;
    edit(k["quantization_config"]["config_groups"]["group_0"]["input_activations"]);
    return error_of([&] { parse_hf_config(k, "cfg"); });
  };
  std::string e = refused([](json& a) { a["strategy"] = "token"; });
  EXPECT_NE(e.find("input_activations.strategy is \"token\"; linnet reads \"tensor\""), std::string::npos) << e;
  e = refused([](json& a) { a["type"] = "int"; });
  EXPECT_NE(e.find("input_activations.type is \"int\"; linnet reads \"float\""), std::string::npos) << e;

  const std::string q = "model.layers.1.self_attn.q_proj.input_scale", k = "model.layers.1.self_attn.k_proj.input_scale";
  {  // q's and k's differ: q|k|v rounds one input once
    ScratchDir d;
    edited_fixture(golden / "ct_fp8_static_f32", d, [](json&) {}, {{k, Tensor::from_floats({1}, {0.5f})}});
    e = load_error(d);
    EXPECT_NE(e.find(k + " is 0.5, but " + q + " is "), std::string::npos) << e;
    EXPECT_NE(e.find("one static scale"), std::string::npos) << e;
  }
  {  // a zero scale
    ScratchDir d;
    edited_fixture(golden / "ct_fp8_static_f32", d, [](json&) {},
                   {{"model.layers.0.mlp.down_proj.input_scale", Tensor::from_floats({1}, {0.0f})}});
    e = load_error(d);
    EXPECT_NE(e.find("model.layers.0.mlp.down_proj.input_scale is 0: a static activation scale must be positive"),
              std::string::npos)
        << e;
  }
  {  // a missing one
    ScratchDir d;
    SafetensorsFile f((golden / "ct_fp8_static_f32/model.safetensors").string());
    std::vector<std::pair<std::string, Tensor>> kept;
    for (const auto& n : f.names())
      if (n != "model.layers.0.mlp.down_proj.input_scale") kept.emplace_back(n, f.read(n));
    std::ofstream(d / "config.json") << cfg.dump(2);
    save_safetensors(d / "model.safetensors", kept);
    e = load_error(d);
    EXPECT_NE(e.find("model.layers.0.mlp.down_proj.input_scale"), std::string::npos) << e;
  }
}
