// MXFP4 weights (issue 37: E2M1 values with an E8M0 scale per block of 32 columns, as
// compressed-tensors' mxfp4-pack-quantized stores them and gpt-oss ships its experts): the CPU
// kernels against the dense product on the dequantized matrix, quantization_config's reading,
// slices on block boundaries, the footprint, and the refusals of bad checkpoints. The whole model
// against compressed-tensors' own decompression in transformers: tests/conformance_test.cpp
// (fixture ct_mxfp4_f32 at Shards 1, 2 and 4).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "architectures/hf_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "core/backend.h"
#include "core/cpu/packed_matmul.h"
#include "fixture_edit_util.h"
#include "layers/footprint.h"
#include "layers/generics.h"
#include "layers/parameters.h"
#include "parallel/communicator.h"
#include "runtime/loader.h"

using namespace linnet;
using linnet::testutil::edited_fixture;
using linnet::testutil::error_of;
using linnet::testutil::expect_every_kernel_gives_the_dense_product;
using linnet::testutil::load_error;
using linnet::testutil::matrix_spec;
using linnet::testutil::read_text;
using linnet::testutil::ScratchDir;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kGolden = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden";

// E2M1 by its definition (OCP MX spec): sign, 2 exponent bits of bias 1, 1 mantissa bit; code 1
// is the subnormal ½.
float e2m1(int code) {
  const int e = (code >> 1) & 3, m = code & 1;
  const float mag = e == 0 ? 0.5f * static_cast<float>(m) : std::ldexp(1.0f + 0.5f * static_cast<float>(m), e - 1);
  return (code & 8) ? -mag : mag;
}

// A [rows, cols] matrix as compressed-tensors stores it: values U8 [rows, cols/2] (the first of
// two in the low nibble), scales E8M0 [rows, cols/32]; and its dequantization e2m1 · 2^(e − 127).
struct Packed {
  Tensor bytes, scales, dequantized;
};
Packed quantize(int64_t rows, int64_t cols, uint32_t seed, int min_exp = 100, int max_exp = 130) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 15), exp(min_exp, max_exp);
  const int64_t blocks = (cols + 31) / 32;
  Packed out{Tensor::zeros({rows, (cols + 1) / 2}, DType::u8), Tensor::empty({rows, blocks}, DType::f8_e8m0),
             Tensor::empty({rows, cols}, DType::f32)};
  for (int64_t i = 0; i < rows * blocks; ++i) out.scales.ptr<uint8_t>()[i] = static_cast<uint8_t>(exp(rng));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int q = code(rng);
      out.bytes.ptr<uint8_t>()[r * ((cols + 1) / 2) + c / 2] |= static_cast<uint8_t>(q << (4 * (c % 2)));
      const int e = out.scales.ptr<uint8_t>()[r * blocks + c / 32];
      out.dequantized.ptr<float>()[r * cols + c] = std::ldexp(e2m1(q), e - 127);
    }
  return out;
}

Backend::QuantizedPart part(const Packed& p, int64_t cols) { return {p.bytes, p.scales, Tensor(), cols}; }

}  // namespace

TEST(Mxfp4, E8M0AndE2M1AreReadAsTheFormatDefinesThem) {
  EXPECT_EQ(f8_e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(f8_e8m0_to_f32(0), std::ldexp(1.0f, -127));  // f32's subnormal, not 0
  EXPECT_EQ(f8_e8m0_to_f32(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(f8_e8m0_to_f32(255)));
  EXPECT_EQ(parse_dtype("F8_E8M0"), DType::f8_e8m0);
  EXPECT_EQ(parse_dtype("U8"), DType::u8);
  const uint8_t e[4] = {0, 127, 255, 1};
  EXPECT_EQ(first_non_finite(e, DType::f8_e8m0, 4), 2);
  EXPECT_EQ(first_non_finite(e, DType::f8_e8m0, 2), -1);
  float f[2];
  convert(e, DType::f8_e8m0, f, DType::f32, 2);
  EXPECT_EQ(f[1], 1.0f);
  // Every code and the extreme scales, one row: the unpacked weights are the definition's.
  Packed w = quantize(1, 64, 1);
  for (int c = 0; c < 16; ++c) w.bytes.ptr<uint8_t>()[c / 2] = static_cast<uint8_t>(c % 2 ? (c << 4) | (c - 1) : 0);
  w.scales.ptr<uint8_t>()[0] = 0;
  w.scales.ptr<uint8_t>()[1] = 254;
  auto be = make_cpu_backend();
  const Tensor q = be->upload_quantized_matrix({part(w, 64)}, WeightLayout::mxfp4_blocks());
  std::vector<float> row(64);
  cpu::unpack_rows_mxfp4_f32(q.storage()->data, q.storage()->packed_rows, 64, 32, 0, 1, row.data());
  for (int c = 0; c < 16; ++c) EXPECT_EQ(row[static_cast<size_t>(c)], std::ldexp(e2m1(c), -127)) << "code " << c;
  EXPECT_EQ(e2m1(7), 6.0f);
  EXPECT_EQ(e2m1(9), -0.5f);
}

TEST(Mxfp4, EveryKernelGivesTheDenseProductOnTheDequantizedWeights) {
  auto be = make_cpu_backend();
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  // Rows not whole panels; one block, several, a ragged last one; tiny scales (E8M0 0: subnormal
  // weights) in one case.
  struct Case {
    int64_t in;
    int min_exp, max_exp;
  };
  for (const Case c : {Case{32, 100, 130}, Case{128, 110, 125}, Case{200, 120, 128}, Case{96, 0, 3}}) {
    const int64_t o = 45, row0 = 7, rows = 29;
    const Packed w = quantize(o, c.in, static_cast<uint32_t>(c.in + c.min_exp), c.min_exp, c.max_exp);
    const Tensor q = be->upload_quantized_matrix({part(w, c.in)}, WeightLayout::mxfp4_blocks());
    EXPECT_EQ(q.shape(), (Shape{o, c.in}));
    const Tensor dense = be->upload_matrix(w.dequantized);
    std::vector<float> row(static_cast<size_t>(rows * c.in));
    cpu::unpack_rows_mxfp4_f32(q.storage()->data, q.storage()->packed_rows, c.in, 32, row0, rows, row.data());
    EXPECT_EQ(row, w.dequantized.rows(row0, row0 + rows).to_floats()) << "in " << c.in;
    std::vector<float> xf(static_cast<size_t>(40 * c.in));
    for (auto& v : xf) v = nd(rng);
    const Tensor x = Tensor::from_floats({40, c.in}, xf);
    expect_every_kernel_gives_the_dense_product(x, dense, row0, rows, [&](int64_t n, const char* k, float* out) {
      cpu::packed_matmul_mxfp4(x.ptr<float>(), n, c.in, q.storage()->data, q.storage()->packed_rows, 32, row0, rows, out, k);
    }, str("in ", c.in));
    // Through the backend's matmul, whole and on a view of rows (a fused matrix's part).
    Tensor got = Tensor::empty({5, o}, DType::f32), want = Tensor::empty({5, o}, DType::f32);
    be->matmul(x.rows(0, 5), q, nullptr, got);
    be->matmul(x.rows(0, 5), dense, nullptr, want);
    EXPECT_EQ(got.to_floats(), want.to_floats()) << "in " << c.in;
    Tensor got_view = Tensor::empty({5, rows}, DType::f32), want_view = Tensor::empty({5, rows}, DType::f32);
    be->matmul(x.rows(0, 5), q.rows(row0, row0 + rows), nullptr, got_view);
    be->matmul(x.rows(0, 5), dense.rows(row0, row0 + rows), nullptr, want_view);
    EXPECT_EQ(got_view.to_floats(), want_view.to_floats()) << "in " << c.in;
    // Held as stored: half a byte a weight and one byte a block of 32 (plus the last panel's padding).
    EXPECT_EQ(q.storage()->bytes, (cpu::packed_mxfp4_bytes(o, c.in, 32) + 3) / 4 * 4) << "in " << c.in;
    EXPECT_LE(static_cast<int64_t>(cpu::packed_mxfp4_bytes(o, c.in, 32)),
              64 * ((c.in + 1) / 2 + (c.in + 31) / 32) + 64) << "in " << c.in;
  }
}

// Fused matrices (q|k|v, gate|up) stack their parts' rows, each with its own scales.
TEST(Mxfp4, StackedPartsKeepTheirOwnScalesAndBadPartsAreRefused) {
  auto be = make_cpu_backend();
  const Packed a = quantize(24, 64, 1), b = quantize(40, 64, 2);
  const Tensor q = be->upload_quantized_matrix({part(a, 64), part(b, 64)}, WeightLayout::mxfp4_blocks());
  const Tensor dense = be->upload_matrix(stack_rows({a.dequantized, b.dequantized}));
  const Tensor x = Tensor::from_floats({3, 64}, std::vector<float>(192, 0.25f));
  Tensor got = Tensor::empty({3, 64}, DType::f32), want = Tensor::empty({3, 64}, DType::f32);
  be->matmul(x, q, nullptr, got);
  be->matmul(x, dense, nullptr, want);
  EXPECT_EQ(got.to_floats(), want.to_floats());
  std::string e = error_of([&] {
    be->upload_quantized_matrix({{a.bytes, a.scales, Tensor::zeros({3, 2}, DType::i32), 64}}, WeightLayout::mxfp4_blocks());
  });
  EXPECT_NE(e.find("mxfp4 takes no zero points"), std::string::npos) << e;
  e = error_of([&] { be->upload_quantized_matrix({part(a, 72)}, WeightLayout::mxfp4_blocks()); });
  EXPECT_NE(e.find("u8 [rows, 36] bytes"), std::string::npos) << e;
  e = error_of([&] {
    be->upload_quantized_matrix({{a.bytes, a.scales.to(DType::f32), Tensor(), 64}}, WeightLayout::mxfp4_blocks());
  });
  EXPECT_NE(e.find("scales f8_e8m0 [24, 2]"), std::string::npos) << e;
}

TEST(Mxfp4, CompressedTensorsMxfp4PackQuantizedIsReadOrRefusedByName) {
  const json fixture = json::parse(read_text(kGolden / "ct_mxfp4_f32/config.json"));
  const ModelConfig c = parse_hf_config(fixture, "cfg");
  ASSERT_TRUE(c.quantization);
  EXPECT_EQ(c.quantization->matrices.describe(), "mxfp4 blocks of 32");
  EXPECT_EQ(c.quantization->matrices.values_suffix, "_packed");
  EXPECT_EQ(c.quantization->matrices.scale_dtype, DType::f8_e8m0);

  auto refused = [&](const std::function<void(json&)>& edit) {
    json k = fixture;
    edit(k["quantization_config"]["config_groups"]["group_0"]);
    return error_of([&] { parse_hf_config(k, "cfg"); });
  };
  std::string e = refused([](json& g) { g["weights"]["group_size"] = 16; });
  EXPECT_NE(e.find("config_groups.group_0.weights.group_size is 16; linnet reads 32 (mxfp4-pack-quantized"),
            std::string::npos) << e;
  e = refused([](json& g) { g["weights"]["scale_dtype"] = "torch.float8_e4m3fn"; });
  EXPECT_NE(e.find("weights.scale_dtype is \"torch.float8_e4m3fn\"; linnet reads \"torch.uint8\""), std::string::npos) << e;
  e = refused([](json& g) { g["weights"]["symmetric"] = false; });
  EXPECT_NE(e.find("weights.symmetric is false; linnet reads true"), std::string::npos) << e;
  e = refused([](json& g) {
    g["input_activations"] = {{"num_bits", 4}, {"type", "float"}, {"strategy", "group"}, {"group_size", 32}};
  });
  EXPECT_NE(e.find("input_activations is not supported with mxfp4-pack-quantized"), std::string::npos) << e;
  json nv = fixture;
  nv["quantization_config"]["format"] = "nvfp4-pack-quantized";
  e = error_of([&] { parse_hf_config(nv, "cfg"); });
  EXPECT_NE(e.find("quantization_config.format 'nvfp4-pack-quantized' is not supported yet"), std::string::npos) << e;
}

// Blocks of 32 columns: a column slice (o_proj, down_proj) must keep them whole; rows slice freely.
TEST(Mxfp4, ASliceThatCutsABlockIsRefusedNamingTheTensor) {
  const auto all = [](WeightFormat) { return true; };
  const ModelConfig c = load_hf_config((kGolden / "ct_mxfp4_f32").string());
  for (int64_t s : {1, 2, 4})
    EXPECT_NO_THROW(check_weight_layouts(parameter_specs(c, bind_generics(c, RunOptions{1, 32, s, 8, std::nullopt})), s,
                                         all, "cpu"));
  const WeightLayout l = WeightLayout::mxfp4_blocks();
  const ParamSpec o8 = matrix_spec("model.layers.0.self_attn.o_proj.weight", {128, 128}, Split::columns, 16, l);
  const std::string e = error_of([&] { o8.check_blocks(8); });
  EXPECT_NE(e.find("o_proj.weight: the slice [0, 16) of dimension 1 (columns) of 128 cuts a block of 32"),
            std::string::npos) << e;
  EXPECT_EQ(l.slice_unit(0), 1);
  EXPECT_EQ(l.slice_unit(1), 32);
  // What a shard reads: its columns' bytes and its blocks' exponents.
  const ParamSpec o = matrix_spec("model.layers.0.self_attn.o_proj.weight", {128, 128}, Split::columns, 32, l);
  const ParamSpec v = o.values_part();
  EXPECT_EQ(v.hf_name, "model.layers.0.self_attn.o_proj.weight_packed");
  EXPECT_EQ(v.full, (Shape{128, 64}));
  EXPECT_EQ(v.shard_range(3), (std::pair<int64_t, int64_t>{48, 64}));
  const auto parts = o.companions();
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].hf_name, "model.layers.0.self_attn.o_proj.weight_scale");
  EXPECT_EQ(parts[0].full, (Shape{128, 4}));
  EXPECT_EQ(parts[0].shard_range(3), (std::pair<int64_t, int64_t>{3, 4}));
}

TEST(Mxfp4, BadCheckpointsAreRefusedNamingFileTensorAndRule) {
  const fs::path fixture = kGolden / "ct_mxfp4_f32";
  const std::string t = "model.layers.1.self_attn.k_proj.weight";  // [64, 128]
  {  // a NaN scale (E8M0 255)
    ScratchDir d;
    SafetensorsFile f((fixture / "model.safetensors").string());
    Tensor s = f.read(t + "_scale");
    ASSERT_EQ(s.dtype(), DType::u8);
    s.ptr<uint8_t>()[5] = 255;
    edited_fixture(fixture, d, [](json&) {}, {{t + "_scale", s}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor '" + t + "_scale' holds NaN at [1, 1]"), std::string::npos) << e;
  }
  {  // packed bytes of the wrong count
    ScratchDir d;
    edited_fixture(fixture, d, [](json&) {}, {{t + "_packed", Tensor::zeros({64, 63}, DType::u8)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find(t + "_packed"), std::string::npos) << e;
    EXPECT_NE(e.find("[64, 64]"), std::string::npos) << e;
  }
  {  // values stored as another dtype
    ScratchDir d;
    edited_fixture(fixture, d, [](json&) {}, {{t + "_packed", Tensor::zeros({64, 64}, DType::i8)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor '" + t + "_packed' is stored as i8, but quantization_config (mxfp4 blocks of 32) stores "
                     "it as u8"),
              std::string::npos)
        << e;
  }
  {  // scales stored as floats, not exponents
    ScratchDir d;
    edited_fixture(fixture, d, [](json&) {}, {{t + "_scale", Tensor::zeros({64, 4}, DType::f32)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor '" + t + "_scale' is stored as f32, but quantization_config stores it as f8_e8m0 (or U8 "
                     "bytes)"),
              std::string::npos)
        << e;
  }
  {  // a zero point where the scheme is symmetric
    ScratchDir d;
    edited_fixture(fixture, d, [](json&) {}, {{t + "_zero_point", Tensor::zeros({64, 4}, DType::u8)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find(t + "_zero_point"), std::string::npos) << e;
  }
  // The fixture itself loads, at 4 bits and a byte per block.
  ScratchDir d;
  edited_fixture(fixture, d, [](json&) {});
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  EXPECT_NO_THROW(load_model(d.str(), RunOptions{}, *be, comm));
}

TEST(Mxfp4, TheFootprintCountsStoredBytes) {
  const ModelConfig c = load_hf_config((kGolden / "ct_mxfp4_f32").string());
  const Generics g = bind_generics(c, RunOptions{1, 32, 1, 8, std::nullopt});
  for (const ParamSpec& p : parameter_specs(c, g)) {
    if (p.card_name != "layers[0].attention.q_proj.weight") continue;
    // 128 × 128 at 4 bits, 128 × 4 one-byte exponents: the file's bytes.
    EXPECT_EQ(p.layout.bytes(p.full, DType::f32), 128 * 64 + 128 * 4);
    return;
  }
  FAIL() << "no q_proj";
}
