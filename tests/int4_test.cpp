// 4-bit integer weights with group scales and zero points (issue 37: compressed-tensors'
// pack-quantized W4A16): the CPU kernels against the dense product on the dequantized matrix,
// quantization_config's reading, slices on group and word boundaries, and the refusals of bad
// checkpoints. Whole models against transformers / compressed-tensors: tests/conformance_test.cpp
// (fixtures ct_w4a16_f32, ct_w4a16_asym_f32 at Shards 1, 2 and 4).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "architectures/hf_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "fixture_edit_util.h"
#include "core/backend.h"
#include "core/cpu/packed_matmul.h"
#include "layers/footprint.h"
#include "layers/generics.h"
#include "layers/parameters.h"
#include "parallel/communicator.h"
#include "runtime/loader.h"

using namespace linnet;
using linnet::testutil::error_of;
using linnet::testutil::ScratchDir;
using linnet::testutil::edited_fixture;
using linnet::testutil::expect_every_kernel_gives_the_dense_product;
using linnet::testutil::matrix_spec;
using linnet::testutil::load_error;
using linnet::testutil::read_text;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kGolden = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden";

// A [rows, cols] matrix in compressed-tensors' packing: signed 4-bit q (and zero points) +8,
// eight a word from the low bits; values along the row, zero points along the column of groups.
struct Packed {
  Tensor words, scales, zero_points, dequantized;
};
Packed quantize(int64_t rows, int64_t cols, int64_t group, bool symmetric, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> q4(-8, 7);
  std::normal_distribution<float> nd;
  const int64_t groups = (cols + group - 1) / group, words = (cols + 7) / 8;
  Packed out{Tensor::zeros({rows, words}, DType::i32), Tensor::empty({rows, groups}, DType::f32),
             symmetric ? Tensor() : Tensor::zeros({(rows + 7) / 8, groups}, DType::i32),
             Tensor::empty({rows, cols}, DType::f32)};
  std::vector<int> zero(static_cast<size_t>(rows * groups), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < groups; ++b) {
      out.scales.ptr<float>()[r * groups + b] = std::fabs(nd(rng)) * 0.01f + 1e-4f;
      if (symmetric) continue;
      const int z = q4(rng);
      zero[static_cast<size_t>(r * groups + b)] = z;
      out.zero_points.ptr<uint32_t>()[(r / 8) * groups + b] |= static_cast<uint32_t>(z + 8) << (4 * (r % 8));
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int q = q4(rng);
      out.words.ptr<uint32_t>()[r * words + c / 8] |= static_cast<uint32_t>(q + 8) << (4 * (c % 8));
      const int64_t g = r * groups + c / group;
      out.dequantized.ptr<float>()[r * cols + c] =
          (static_cast<float>(q) - static_cast<float>(zero[static_cast<size_t>(g)])) * out.scales.ptr<float>()[g];
    }
  return out;
}

Backend::QuantizedPart part(const Packed& p, int64_t cols) { return {p.words, p.scales, p.zero_points, cols}; }

}  // namespace

TEST(Int4, EveryKernelGivesTheDenseProductOnTheDequantizedWeights) {
  auto be = make_cpu_backend();
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  struct Case {
    int64_t in, group;
    bool symmetric;
  };
  // Groups of 8 to a whole row (per channel); ragged last groups; rows not whole panels.
  for (const Case c : {Case{64, 16, true}, Case{64, 16, false}, Case{200, 32, false}, Case{40, 8, true},
                       Case{256, 128, false}, Case{96, WeightLayout::kWhole, true}}) {
    const int64_t o = 45, row0 = 7, rows = 29;
    const Packed w = quantize(o, c.in, std::min(c.group, c.in), c.symmetric, static_cast<uint32_t>(c.in + c.group));
    const Tensor q = be->upload_quantized_matrix({part(w, c.in)}, WeightLayout::int4_groups(c.group, c.symmetric));
    EXPECT_EQ(q.shape(), (Shape{o, c.in}));
    const Tensor dense = be->upload_matrix(w.dequantized);
    const int64_t g = q.storage()->packed_block_cols;
    std::vector<float> row(static_cast<size_t>(rows * c.in));
    cpu::unpack_rows_int4_f32(q.storage()->data, q.storage()->packed_rows, c.in, g, row0, rows, row.data());
    EXPECT_EQ(row, w.dequantized.rows(row0, row0 + rows).to_floats()) << "in " << c.in;
    std::vector<float> xf(static_cast<size_t>(40 * c.in));
    for (auto& v : xf) v = nd(rng);
    const Tensor x = Tensor::from_floats({40, c.in}, xf);
    expect_every_kernel_gives_the_dense_product(x, dense, row0, rows, [&](int64_t n, const char* k, float* out) {
      cpu::packed_matmul_int4(x.ptr<float>(), n, c.in, q.storage()->data, q.storage()->packed_rows, g, row0, rows, out, k);
    }, str("in ", c.in));
    // Through the backend's matmul, whole and on a view of rows (a fused matrix's part), with a
    // bias: as the dense matrix.
    Tensor got = Tensor::empty({5, o}, DType::f32), want = Tensor::empty({5, o}, DType::f32);
    const Tensor bias = Tensor::from_floats({o}, std::vector<float>(static_cast<size_t>(o), 0.5f));
    be->matmul(x.rows(0, 5), q, &bias, got);
    be->matmul(x.rows(0, 5), dense, &bias, want);
    EXPECT_EQ(got.to_floats(), want.to_floats()) << "in " << c.in;
    Tensor got_view = Tensor::empty({5, rows}, DType::f32), want_view = Tensor::empty({5, rows}, DType::f32);
    be->matmul(x.rows(0, 5), q.rows(row0, row0 + rows), nullptr, got_view);
    be->matmul(x.rows(0, 5), dense.rows(row0, row0 + rows), nullptr, want_view);
    EXPECT_EQ(got_view.to_floats(), want_view.to_floats()) << "in " << c.in;
    // Held at 4 bits: half a byte a weight plus a scale and a zero point per row and group.
    EXPECT_EQ(q.storage()->bytes, (cpu::packed_int4_bytes(o, c.in, g) + 3) / 4 * 4) << "in " << c.in;
    EXPECT_LT(q.storage()->bytes, dense.storage()->bytes / 3) << "in " << c.in;
  }
}

// Fused matrices (q|k|v, gate|up) stack their parts' rows, each with its own scales and zero points.
TEST(Int4, StackedPartsKeepTheirOwnScalesAndZeroPoints) {
  auto be = make_cpu_backend();
  const Packed a = quantize(24, 64, 16, false, 1), b = quantize(40, 64, 16, false, 2);
  const Tensor q = be->upload_quantized_matrix({part(a, 64), part(b, 64)}, WeightLayout::int4_groups(16, false));
  const Tensor dense = be->upload_matrix(stack_rows({a.dequantized, b.dequantized}));
  const Tensor x = Tensor::from_floats({3, 64}, std::vector<float>(192, 0.25f));
  Tensor got = Tensor::empty({3, 64}, DType::f32), want = Tensor::empty({3, 64}, DType::f32);
  be->matmul(x, q, nullptr, got);
  be->matmul(x, dense, nullptr, want);
  EXPECT_EQ(got.to_floats(), want.to_floats());
  EXPECT_EQ(q.storage()->bytes, (cpu::packed_int4_bytes(64, 64, 16) + 3) / 4 * 4);
  // Its parts are checked: zero points where the scheme is symmetric, words of another count.
  std::string e = error_of([&] { be->upload_quantized_matrix({part(a, 64)}, WeightLayout::int4_groups(16, true)); });
  EXPECT_NE(e.find("takes no zero points"), std::string::npos) << e;
  e = error_of([&] { be->upload_quantized_matrix({part(a, 72)}, WeightLayout::int4_groups(16, false)); });
  EXPECT_NE(e.find("i32 [rows, 9] words"), std::string::npos) << e;
}

TEST(Int4, CompressedTensorsPackQuantizedIsReadOrRefusedByName) {
  const json sym = json::parse(read_text(kGolden / "ct_w4a16_f32/config.json"));
  const ModelConfig c = parse_hf_config(sym, "cfg");
  ASSERT_TRUE(c.quantization);
  EXPECT_EQ(c.quantization->matrices.describe(), "int4 groups of 16");
  EXPECT_EQ(c.quantization->matrices.values_suffix, "_packed");
  EXPECT_FALSE(c.quantization->matrices.zero_point_dtype);
  const ModelConfig a = parse_hf_config(json::parse(read_text(kGolden / "ct_w4a16_asym_f32/config.json")), "cfg");
  EXPECT_EQ(a.quantization->matrices.describe(), "int4 asymmetric groups of 16");

  auto refused = [&](const std::function<void(json&)>& edit) {
    json k = sym;
    edit(k["quantization_config"]["config_groups"]["group_0"]);
    return error_of([&] { parse_hf_config(k, "cfg"); });
  };
  std::string e = refused([](json& g) { g["weights"]["num_bits"] = 3; });
  EXPECT_NE(e.find("config_groups.group_0.weights.num_bits is 3; linnet reads 4 or 8"), std::string::npos) << e;
  // actorder: "weight"/"static" left the groups in order; "group"/"dynamic" saves weight_g_idx.
  for (const char* order : {"weight", "static", "group", "dynamic"}) {
    json k = sym;
    k["quantization_config"]["config_groups"]["group_0"]["weights"]["actorder"] = order;
    const ModelConfig r = parse_hf_config(k, "cfg");
    const bool g_idx = std::string(order) == "group" || std::string(order) == "dynamic";
    EXPECT_EQ(r.quantization->matrices.describe(), g_idx ? "int4 groups of 16 with g_idx" : "int4 groups of 16") << order;
    EXPECT_EQ(r.quantization->matrices.companions_of({64, 64}).back().suffix, g_idx ? "_g_idx" : "_scale") << order;
  }
  e = refused([](json& g) { g["weights"]["actorder"] = "sideways"; });
  EXPECT_NE(e.find("weights.actorder \"sideways\" is not a compressed-tensors activation ordering"), std::string::npos) << e;
  e = refused([](json& g) { g["weights"]["actorder"] = "group", g["weights"]["strategy"] = "channel"; });
  EXPECT_NE(e.find("weights.actorder \"group\" needs strategy \"group\""), std::string::npos) << e;
  e = refused([](json& g) { g["weights"]["actorder"] = "group", g["weights"]["num_bits"] = 8; });
  EXPECT_NE(e.find("weights.actorder \"group\" with 8-bit pack-quantized weights is not read yet"), std::string::npos) << e;
  e = refused([](json& g) { g["weights"]["group_size"] = 12; });
  EXPECT_NE(e.find("group_size must be a positive multiple of 8"), std::string::npos) << e;
  e = refused([](json& g) { g["weights"]["strategy"] = "tensor"; });
  EXPECT_NE(e.find("weights.strategy 'tensor' is not supported with pack-quantized"), std::string::npos) << e;
  e = refused([](json& g) { g["input_activations"] = {{"num_bits", 8}, {"type", "int"}}; });
  EXPECT_NE(e.find("input_activations is not supported with pack-quantized"), std::string::npos) << e;
  e = refused([](json& g) { g["format"] = "float-quantized"; });
  EXPECT_NE(e.find("differs from format 'pack-quantized'"), std::string::npos) << e;
}

// Slices fall on whole groups (columns) and, with zero points, on whole words of 8 rows.
TEST(Int4, ASliceThatCutsAGroupOrAWordIsRefusedNamingTheTensor) {
  const auto all = [](WeightFormat) { return true; };
  const ModelConfig c = load_hf_config((kGolden / "ct_w4a16_asym_f32").string());
  for (int64_t s : {1, 2, 4})
    EXPECT_NO_THROW(check_weight_layouts(parameter_specs(c, bind_generics(c, RunOptions{1, 32, s, 8, std::nullopt})), s,
                                         all, "cpu"));
  ModelConfig wide = c;
  wide.quantization->matrices = WeightLayout::int4_groups(32, false);
  const std::string e = error_of([&] {
    check_weight_layouts(parameter_specs(wide, bind_generics(wide, RunOptions{1, 32, 4, 8, std::nullopt})), 4, all, "cpu");
  });
  EXPECT_NE(e.find("o_proj.weight: the slice [0, 16) of dimension 1 (columns) of 64 cuts a block of 32"), std::string::npos)
      << e;
  // The zero points' words: 8 rows each. k_proj's 32 rows at Shards 8 would give 4.
  const WeightLayout l = WeightLayout::int4_groups(16, false);
  EXPECT_EQ(l.slice_unit(0), 8);
  EXPECT_EQ(l.slice_unit(1), 16);
  EXPECT_EQ(WeightLayout::int4_groups(16, true).slice_unit(0), 1);
  EXPECT_EQ(WeightLayout::int4_groups(WeightLayout::kWhole, true).slice_unit(1), 8);
  const ParamSpec k = matrix_spec("model.layers.0.self_attn.k_proj.weight", {32, 64}, Split::rows, 4, l);
  EXPECT_NE(error_of([&] { k.check_blocks(8); }).find("cuts a block of 8"), std::string::npos);
  // What a shard reads: the packed words of its columns, its groups' scales, its rows' zero-point words.
  const ParamSpec o = matrix_spec("model.layers.0.self_attn.o_proj.weight", {64, 64}, Split::columns, 16, l);
  const ParamSpec v = o.values_part();
  EXPECT_EQ(v.hf_name, "model.layers.0.self_attn.o_proj.weight_packed");
  EXPECT_EQ(v.full, (Shape{64, 8}));
  EXPECT_EQ(v.shard_range(3), (std::pair<int64_t, int64_t>{6, 8}));
  const auto parts = o.companions();
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].hf_name, "model.layers.0.self_attn.o_proj.weight_scale");
  EXPECT_EQ(parts[0].shard_range(3), (std::pair<int64_t, int64_t>{3, 4}));
  EXPECT_EQ(parts[1].hf_name, "model.layers.0.self_attn.o_proj.weight_zero_point");
  EXPECT_EQ(parts[1].full, (Shape{8, 4}));
  const ParamSpec q = matrix_spec("model.layers.0.self_attn.q_proj.weight", {64, 64}, Split::rows, 16, l);
  EXPECT_EQ(q.companions()[1].shard_range(2), (std::pair<int64_t, int64_t>{4, 6}));
}

TEST(Int4, BadCheckpointsAreRefusedNamingFileTensorAndRule) {
  const fs::path sym = kGolden / "ct_w4a16_f32", asym = kGolden / "ct_w4a16_asym_f32";
  const std::string t = "model.layers.1.self_attn.k_proj.weight";
  {  // packed ints of the wrong count
    ScratchDir d;
    edited_fixture(sym, d, [](json&) {}, {{t + "_packed", Tensor::zeros({32, 7}, DType::i32)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find(t + "_packed"), std::string::npos) << e;
    EXPECT_NE(e.find("[32, 8]"), std::string::npos) << e;
  }
  {  // a zero point where the scheme is symmetric
    ScratchDir d;
    edited_fixture(sym, d, [](json&) {}, {{t + "_zero_point", Tensor::zeros({4, 4}, DType::i32)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("model.safetensors: tensor '" + t + "_zero_point' is a zero point, but quantization_config says "
                     "int4 groups of 16 (symmetric: no zero points)"),
              std::string::npos)
        << e;
  }
  {  // asymmetric without its zero points
    ScratchDir d;
    edited_fixture(sym, d, [](json& j) {
      j["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"] = false;
    });
    const std::string e = load_error(d);
    EXPECT_NE(e.find("_zero_point"), std::string::npos) << e;
  }
  {  // a NaN scale
    ScratchDir d;
    SafetensorsFile f((asym / "model.safetensors").string());
    Tensor s = f.read(t + "_scale").to(DType::f32);
    s.ptr<float>()[5] = std::nanf("");
    edited_fixture(asym, d, [](json&) {}, {{t + "_scale", s}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor '" + t + "_scale' holds NaN at [1, 1]"), std::string::npos) << e;
  }
  {  // values stored as another dtype
    ScratchDir d;
    edited_fixture(sym, d, [](json&) {}, {{t + "_packed", Tensor::zeros({32, 8}, DType::f32)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor '" + t + "_packed' is stored as f32, but quantization_config (int4 groups of 16) "
                     "stores it as i32"),
              std::string::npos)
        << e;
  }
  // The fixture itself loads, its weight_shape tensors taken as known.
  ScratchDir d;
  edited_fixture(sym, d, [](json&) {});
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  EXPECT_NO_THROW(load_model(d.str(), RunOptions{}, *be, comm));
}

TEST(Int4, TheFootprintCountsStoredBytes) {
  const ModelConfig c = load_hf_config((kGolden / "ct_w4a16_asym_f32").string());
  const Generics g = bind_generics(c, RunOptions{1, 32, 1, 8, std::nullopt});
  for (const ParamSpec& p : parameter_specs(c, g)) {
    if (p.card_name != "layers[0].attention.q_proj.weight") continue;
    // 64 × 64 at 4 bits, 64 × 4 f32 scales, 8 × 4 i32 zero-point words.
    EXPECT_EQ(p.layout.bytes(p.full, DType::f32), 64 * 32 + 64 * 4 * 4 + 8 * 4 * 4);
    return;
  }
  FAIL() << "no q_proj";
}

// A compressed-tensors mixture of experts: weight-only schemes are read (each expert's matrices
// as their own layers; whole models: conformance's ct_w4a16_qwen3_moe_f32, ct_mxfp4_qwen3_moe_f32
// in both shardings); one that rounds its inputs is refused by name, as SparseMoe's grouped
// products take the experts' inputs as they are.
TEST(Int4, CompressedTensorsMixturesOfExpertsAreRead) {
  const json moe = json::parse(read_text(kGolden / "ct_w4a16_qwen3_moe_f32/config.json"));
  const ModelConfig c = parse_hf_config(moe, "cfg");
  ASSERT_TRUE(c.moe() && c.quantization);
  EXPECT_EQ(c.quantization->matrices.describe(), "int4 groups of 8");
  const Generics g = bind_generics(c, RunOptions{1, 32, 1, 8, std::nullopt});
  int experts = 0;
  for (const ParamSpec& p : parameter_specs(c, g)) {
    if (p.hf_name.find(".mlp.experts.") != std::string::npos) {
      EXPECT_EQ(p.layout.describe(), "int4 groups of 8") << p.hf_name;
      ++experts;
    }
    if (p.hf_name.ends_with(".mlp.gate.weight")) EXPECT_TRUE(p.layout.dense()) << p.hf_name;  // the routers
  }
  EXPECT_EQ(experts, 2 * 8 * 3);  // two sparse layers of 8 experts' gate, up, down
  // Dynamic activations: read, the experts' inputs rounded as a Linear's (fixture
  // ct_fp8_dynamic_qwen3_moe_f32); static ones (an input_scale per expert) refused.
  json w8a8 = moe;
  w8a8["quantization_config"] = json::parse(read_text(kGolden / "ct_w8a8_f32/config.json"))["quantization_config"];
  EXPECT_EQ(parse_hf_config(w8a8, "cfg").quantization->matrices.describe(), "int8 per channel, activations int8 per token");
  w8a8["quantization_config"] = json::parse(read_text(kGolden / "ct_w8a8_static_f32/config.json"))["quantization_config"];
  const std::string e = error_of([&] { parse_hf_config(w8a8, "cfg"); });
  EXPECT_NE(e.find("a compressed-tensors mixture of experts with static input_activations (int8 per channel, "
                   "activations int8 static per tensor (not converted: lm_head)) is not read yet"),
            std::string::npos)
      << e;
}
