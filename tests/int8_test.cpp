// 8-bit integer weights with channel or group scales and int8 activations (issue 37:
// compressed-tensors' int-quantized W8A8): the CPU kernels against the dense product on the
// dequantized matrix, the activations' rounding (a row split across shards rounding with the
// whole row's amax), quantization_config's reading, and the refusals of bad checkpoints. Whole
// models against transformers: tests/conformance_test.cpp (fixture ct_w8a8_f32 at Shards 1, 2, 4).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "architectures/hf_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "fixture_edit_util.h"
#include "core/backend.h"
#include "core/cpu/packed_matmul.h"
#include "layers/generics.h"
#include "layers/linear.h"
#include "layers/parameters.h"
#include "parallel/communicator.h"

using namespace linnet;
using linnet::testutil::error_of;
using linnet::testutil::ScratchDir;
using linnet::testutil::edited_fixture;
using linnet::testutil::expect_every_kernel_gives_the_dense_product;
using linnet::testutil::load_error;
using linnet::testutil::read_text;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kFixture = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden/ct_w8a8_f32";

// A [rows, cols] int8 matrix with a scale per row and group of columns, and its dequantization
// q · scale in f32 (compressed-tensors' q.to(f32) * scale).
struct Quantized {
  Tensor q, scales, dequantized;
};
Quantized quantize(int64_t rows, int64_t cols, int64_t group, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> q8(-128, 127);
  std::normal_distribution<float> nd;
  const int64_t groups = (cols + group - 1) / group;
  Quantized out{Tensor::empty({rows, cols}, DType::i8), Tensor::empty({rows, groups}, DType::f32),
                Tensor::empty({rows, cols}, DType::f32)};
  for (int64_t i = 0; i < rows * groups; ++i) out.scales.ptr<float>()[i] = std::fabs(nd(rng)) * 0.003f + 1e-5f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int v = q8(rng);
      out.q.ptr<int8_t>()[r * cols + c] = static_cast<int8_t>(v);
      out.dequantized.ptr<float>()[r * cols + c] = static_cast<float>(v) * out.scales.ptr<float>()[r * groups + c / group];
    }
  return out;
}

}  // namespace

TEST(Int8, EveryKernelGivesTheDenseProductOnTheDequantizedWeights) {
  auto be = make_cpu_backend();
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  struct Case {
    int64_t in, group;
  };
  // Per channel, groups, a ragged last group; rows not whole panels.
  for (const Case c : {Case{64, WeightLayout::kWhole}, Case{200, 32}, Case{72, 16}, Case{100, 48}}) {
    const int64_t o = 45, row0 = 7, rows = 29, g = std::min(c.group, c.in);
    const Quantized w = quantize(o, c.in, g, static_cast<uint32_t>(c.in));
    const Tensor q = be->upload_quantized_matrix({{w.q, w.scales, Tensor(), c.in}}, WeightLayout::int8_groups(c.group));
    EXPECT_EQ(q.shape(), (Shape{o, c.in}));
    EXPECT_EQ(q.storage()->packed_weights, WeightFormat::int8);
    const Tensor dense = be->upload_matrix(w.dequantized);
    std::vector<float> row(static_cast<size_t>(rows * c.in));
    cpu::unpack_rows_int8_f32(q.storage()->data, q.storage()->packed_rows, c.in, g, row0, rows, row.data());
    EXPECT_EQ(row, w.dequantized.rows(row0, row0 + rows).to_floats()) << "in " << c.in;
    std::vector<float> xf(static_cast<size_t>(40 * c.in));
    for (auto& v : xf) v = nd(rng);
    const Tensor x = Tensor::from_floats({40, c.in}, xf);
    expect_every_kernel_gives_the_dense_product(x, dense, row0, rows, [&](int64_t n, const char* k, float* out) {
      cpu::packed_matmul_int8(x.ptr<float>(), n, c.in, q.storage()->data, q.storage()->packed_rows, g, row0, rows, out, k);
    }, str("in ", c.in));
    // Through the backend's matmul, on a view of rows (a fused matrix's part), with a bias.
    Tensor got = Tensor::empty({5, rows}, DType::f32), want = Tensor::empty({5, rows}, DType::f32);
    const Tensor bias = Tensor::from_floats({rows}, std::vector<float>(static_cast<size_t>(rows), 0.5f));
    be->matmul(x.rows(0, 5), q.rows(row0, row0 + rows), &bias, got);
    be->matmul(x.rows(0, 5), dense.rows(row0, row0 + rows), &bias, want);
    EXPECT_EQ(got.to_floats(), want.to_floats()) << "in " << c.in;
    // Held at a byte a weight plus a scale per row and group.
    EXPECT_EQ(q.storage()->bytes, cpu::packed_fp8_bytes(o, c.in, g)) << "in " << c.in;
  }
  // Its parts are checked: values of another dtype, scales of another shape.
  const Quantized w = quantize(8, 32, 32, 1);
  std::string e = error_of([&] {
    be->upload_quantized_matrix({{w.dequantized, w.scales, Tensor(), 32}}, WeightLayout::int8_groups(WeightLayout::kWhole));
  });
  EXPECT_NE(e.find("i8 row-major matrices"), std::string::npos) << e;
  e = error_of([&] { be->upload_quantized_matrix({{w.q, w.scales, Tensor(), 32}}, WeightLayout::int8_groups(16)); });
  EXPECT_NE(e.find("scales f32 [8, 2]"), std::string::npos) << e;
}

// compressed-tensors' dynamic int8 activations: s = amax / 127.5, round(clamp(x / s, −128, 127))
// · s with ties to even, per row or per group; through a matmul, the product of the rounded rows.
TEST(Int8, ActivationRoundingIsCompressedTensorsInt8) {
  // amax 127.5: s = 1, so x / s is x. 127.5 clamps to 127, −127.5 to −128; 2.5 → 2, 3.5 → 4.
  const std::vector<float> x = {127.5f, 2.5f, 3.5f, -127.5f, -0.5f, 1.5f, 0, 0, 0, 0, 0, 0};
  std::vector<float> out(x.size());
  cpu::round_activations(x.data(), 3, 4, {ActivationFormat::int8, -1}, out.data());
  const float s1 = 1.5f / 127.5f;
  const std::vector<float> expected = {127, 2, 4, -128, std::nearbyint(-0.5f / s1) * s1, 127 * s1,  // 1.5 / s1 = 127.5 clamps to 127
                                   0, 0, 0, 0, 0, 0};  // an all-zero row keeps zeros (scale 2⁻²³)
  EXPECT_EQ(out, expected);
  // Per group of 2: each pair its own scale.
  cpu::round_activations(x.data(), 1, 4, {ActivationFormat::int8, 2}, out.data());
  const float sa = 127.5f / 127.5f, sb = 127.5f / 127.5f;
  EXPECT_EQ(out[1], std::nearbyint(2.5f / sa) * sa);
  EXPECT_EQ(out[2], std::nearbyint(3.5f / sb) * sb);
  // A NaN stays NaN, as torch's.
  const std::vector<float> nan_row = {1.0f, std::nanf(""), 2.0f, 3.0f};
  cpu::round_activations(nan_row.data(), 1, 4, {ActivationFormat::int8, -1}, out.data());
  EXPECT_TRUE(std::isnan(out[1]));

  // Through a Linear: a matrix uploaded with int8 activations has its input rounded first.
  auto be = make_cpu_backend();
  const Quantized w = quantize(33, 64, 64, 4);
  WeightLayout layout = WeightLayout::int8_groups(WeightLayout::kWhole);
  layout.activations = {ActivationFormat::int8, -1};
  const Linear lin{be->upload_quantized_matrix({{w.q, w.scales, Tensor(), 64}}, layout), Tensor()};
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  std::vector<float> xf(3 * 64);
  for (auto& v : xf) v = nd(rng);
  std::vector<float> rounded(xf.size());
  cpu::round_activations(xf.data(), 3, 64, layout.activations, rounded.data());
  SingleCommunicator comm;
  Context ctx{*be, comm};
  Tensor got = Tensor::empty({3, 33}, DType::f32), want = Tensor::empty({3, 33}, DType::f32),
         plain = Tensor::empty({3, 33}, DType::f32);
  lin.forward(ctx, Tensor::from_floats({3, 64}, xf), got);
  be->matmul(Tensor::from_floats({3, 64}, rounded), be->upload_matrix(w.dequantized), nullptr, want);
  EXPECT_EQ(got.to_floats(), want.to_floats());
  be->matmul(Tensor::from_floats({3, 64}, xf), lin.weight, nullptr, plain);  // the product alone does not round
  EXPECT_NE(got.to_floats(), plain.to_floats());
}

TEST(Int8, CompressedTensorsIntQuantizedIsReadOrRefusedByName) {
  const json fixture = json::parse(read_text(kFixture / "config.json"));
  const ModelConfig c = parse_hf_config(fixture, "cfg");
  ASSERT_TRUE(c.quantization);
  EXPECT_EQ(c.quantization->method, "compressed-tensors");
  EXPECT_EQ(c.quantization->matrices.describe(), "int8 per channel, activations int8 per token");
  EXPECT_EQ(c.quantization->matrices.data_dtype, DType::i8);
  EXPECT_EQ(c.quantization->not_converted, std::vector<std::string>{"lm_head"});

  auto refused = [&](const std::function<void(json&)>& edit) {
    json k = fixture;
    edit(k["quantization_config"]["config_groups"]["group_0"]);
    return error_of([&] { parse_hf_config(k, "cfg"); });
  };
  std::string e = refused([](json& g) { g["weights"]["num_bits"] = 4; });
  EXPECT_NE(e.find("config_groups.group_0.weights.num_bits is 4; linnet reads 8 (int-quantized"), std::string::npos) << e;
  e = refused([](json& g) { g["weights"]["symmetric"] = false; });
  EXPECT_NE(e.find("weights.symmetric is false; linnet reads true"), std::string::npos) << e;
  e = refused([](json& g) { g["weights"]["strategy"] = "tensor"; });
  EXPECT_NE(e.find("weights.strategy 'tensor' is not supported with int-quantized weights"), std::string::npos) << e;
  e = refused([](json& g) { g["weights"]["actorder"] = "group"; });
  EXPECT_NE(e.find("weights.actorder \"group\" is not supported yet"), std::string::npos) << e;
  e = refused([](json& g) { g["input_activations"]["symmetric"] = false; });
  EXPECT_NE(e.find("input_activations.symmetric is false; linnet reads true (int-quantized: int8 activations"),
            std::string::npos)
      << e;
  // Static: per tensor only, an input_scale a layer (fixture ct_w8a8_static_f32).
  e = refused([](json& g) { g["input_activations"]["dynamic"] = false; });
  EXPECT_NE(e.find("input_activations.strategy is \"token\"; linnet reads \"tensor\""), std::string::npos) << e;
  {
    json k = fixture;
    auto& a = k["quantization_config"]["config_groups"]["group_0"]["input_activations"];
    a["dynamic"] = false, a["strategy"] = "tensor";
    const ModelConfig s = parse_hf_config(k, "cfg");
    EXPECT_EQ(s.quantization->matrices.describe(), "int8 per channel, activations int8 static per tensor");
    EXPECT_EQ(s.quantization->matrices.companions_of({64, 64}).back().suffix, "input_scale");
  }
  e = refused([](json& g) { g["input_activations"]["type"] = "float"; });
  EXPECT_NE(e.find("input_activations.type is \"float\"; linnet reads \"int\""), std::string::npos) << e;
  e = refused([](json& g) { g["input_activations"]["strategy"] = "tensor"; });
  EXPECT_NE(e.find("input_activations.strategy 'tensor' is not supported"), std::string::npos) << e;
  // Weight-only int8 (W8A16 stored int-quantized) and groups are read.
  json w8a16 = fixture;
  w8a16["quantization_config"]["config_groups"]["group_0"].erase("input_activations");
  w8a16["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "group";
  w8a16["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 32;
  EXPECT_EQ(parse_hf_config(w8a16, "cfg").quantization->matrices.describe(), "int8 groups of 32");
}

// Per-token scales span a whole row: split across shards (a row-parallel layer), the row's amax
// is all-reduced before each shard rounds its columns (layers/linear.h), which gives the
// whole row's rounding. Here: two shards' halves through Linear's rounding, with the amax
// all-reduced by hand, equal the whole row rounded.
TEST(Int8, ARowSplitAcrossShardsRoundsWithTheWholeRowsAmax) {
  auto be = make_cpu_backend();
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  const int64_t n = 5, k = 64;
  std::vector<float> x(static_cast<size_t>(n * k));
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * (i % 64 < 32 ? 1.0f : 8.0f);  // right halves larger
  const ActivationRounding r{ActivationFormat::int8, -1};
  const Tensor whole = Tensor::from_floats({n, k}, x);
  Tensor want = Tensor::empty({n, k}, DType::f32);
  be->round_activations(whole, r, nullptr, want);
  Tensor amax = Tensor::empty({n}, DType::f32);
  be->row_amax(whole, amax);
  for (int64_t half = 0; half < 2; ++half) {
    std::vector<float> part;
    for (int64_t row = 0; row < n; ++row)
      part.insert(part.end(), x.begin() + row * k + half * 32, x.begin() + row * k + half * 32 + 32);
    const Tensor xs = Tensor::from_floats({n, 32}, part);
    Tensor local_amax = Tensor::empty({n}, DType::f32), got = Tensor::empty({n, 32}, DType::f32),
           own = Tensor::empty({n, 32}, DType::f32);
    be->row_amax(xs, local_amax);
    for (int64_t row = 0; row < n; ++row) EXPECT_LE(local_amax.ptr<float>()[row], amax.ptr<float>()[row]);
    be->round_activations(xs, r, &amax, got);  // the all-reduced (whole row's) amax
    be->round_activations(xs, r, nullptr, own);
    const auto w = want.to_floats(), g = got.to_floats();
    for (int64_t row = 0; row < n; ++row)
      for (int64_t c = 0; c < 32; ++c) ASSERT_EQ(g[row * 32 + c], w[row * k + half * 32 + c]) << row << " " << c;
    if (half == 0) {
      EXPECT_NE(own.to_floats(), got.to_floats()) << "the left half's own amax is smaller";
    }
  }
  // The layouts check at every Shards: nothing is refused.
  const auto all = [](WeightFormat) { return true; };
  const ModelConfig c = load_hf_config(kFixture.string());
  for (int64_t s : {1, 2, 4})
    EXPECT_NO_THROW(check_weight_layouts(parameter_specs(c, bind_generics(c, RunOptions{1, 32, s, 8, std::nullopt})), s,
                                         all, "cpu"));
  // A row amax is per row only.
  const std::string e = error_of([&] {
    Tensor out = Tensor::empty({n, k}, DType::f32);
    be->round_activations(whole, {ActivationFormat::int8, 16}, &amax, out);
  });
  EXPECT_NE(e.find("row_amax"), std::string::npos) << e;
}

TEST(Int8, BadCheckpointsAreRefusedNamingFileTensorAndRule) {
  const std::string t = "model.layers.1.self_attn.k_proj.weight";
  {  // values stored as another dtype
    ScratchDir d;
    edited_fixture(kFixture, d, [](json&) {}, {{t, Tensor::zeros({32, 64}, DType::f32)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor '" + t + "' is stored as f32, but quantization_config (int8 per channel, activations "
                     "int8 per token) stores it as i8"),
              std::string::npos)
        << e;
  }
  {  // a scale of the wrong shape (per group where the config says per channel)
    ScratchDir d;
    edited_fixture(kFixture, d, [](json&) {}, {{t + "_scale", Tensor::zeros({32, 4}, DType::f32)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find(t + "_scale"), std::string::npos) << e;
    EXPECT_NE(e.find("[32, 1]"), std::string::npos) << e;
  }
  {  // a NaN scale
    ScratchDir d;
    SafetensorsFile f((kFixture / "model.safetensors").string());
    Tensor s = f.read(t + "_scale").to(DType::f32);
    s.ptr<float>()[3] = std::nanf("");
    edited_fixture(kFixture, d, [](json&) {}, {{t + "_scale", s}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor '" + t + "_scale' holds NaN at [3, 0]"), std::string::npos) << e;
  }
  {  // a zero point in a symmetric scheme
    ScratchDir d;
    edited_fixture(kFixture, d, [](json&) {}, {{t + "_zero_point", Tensor::zeros({32, 1}, DType::i8)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor '" + t + "_zero_point' is a zero point, but quantization_config says int8 per channel"),
              std::string::npos)
        << e;
  }
  // The fixture itself loads, and holds a byte a weight.
  const ModelConfig c = load_hf_config(kFixture.string());
  for (const ParamSpec& p : parameter_specs(c, bind_generics(c, RunOptions{1, 32, 1, 8, std::nullopt}))) {
    if (p.card_name != "layers[0].attention.q_proj.weight") continue;
    EXPECT_EQ(p.layout.bytes(p.full, DType::f32), 64 * 64 + 64 * 4);  // int8 values, an f32 scale a row
  }
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  EXPECT_NO_THROW(load_model(kFixture.string(), RunOptions{}, *be, comm));
}

// compressed-tensors' W8A16 (pack-quantized 8-bit): the words unpack to the int8 matrix (four
// values a word from the low bits, each +128), whose product is then int8's; its config is read
// (symmetric only) and bad words are refused. The whole model: conformance's ct_w8a16_f32.
TEST(Int8, CompressedTensorsW8A16WordsAreTheInt8Matrix) {
  auto be = make_cpu_backend();
  const int64_t o = 37, in = 72;
  const Quantized w = quantize(o, in, 16, 3);
  Tensor words = Tensor::zeros({o, in / 4}, DType::i32);
  for (int64_t r = 0; r < o; ++r)
    for (int64_t c = 0; c < in; ++c)
      words.ptr<uint32_t>()[r * (in / 4) + c / 4] |= static_cast<uint32_t>(w.q.ptr<int8_t>()[r * in + c] + 128) << (8 * (c % 4));
  const Tensor packed = be->upload_quantized_matrix({{words, w.scales, Tensor(), in}}, WeightLayout::int8_packed_groups(16));
  const Tensor bytes = be->upload_quantized_matrix({{w.q, w.scales, Tensor(), in}}, WeightLayout::int8_groups(16));
  std::vector<float> xf(static_cast<size_t>(5 * in));
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = std::sin(0.37f * static_cast<float>(i));
  const Tensor x = Tensor::from_floats({5, in}, xf);
  Tensor a = Tensor::empty({5, o}, DType::f32), b = Tensor::empty({5, o}, DType::f32), dense = Tensor::empty({5, o}, DType::f32);
  be->matmul(x, packed, nullptr, a);
  be->matmul(x, bytes, nullptr, b);
  be->matmul(x, be->upload_matrix(w.dequantized), nullptr, dense);
  EXPECT_EQ(a.to_floats(), b.to_floats());
  EXPECT_EQ(a.to_floats(), dense.to_floats());
  const std::string e = error_of([&] {
    be->upload_quantized_matrix({{Tensor::zeros({o, 17}, DType::i32), w.scales, Tensor(), in}}, WeightLayout::int8_packed_groups(16));
  });
  EXPECT_NE(e.find("i32 [rows, 18] words of 8-bit values"), std::string::npos) << e;

  const fs::path fixture = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden/ct_w8a16_f32";
  const json cfg = json::parse(read_text(fixture / "config.json"));
  const ModelConfig c = parse_hf_config(cfg, "cfg");
  ASSERT_TRUE(c.quantization);
  EXPECT_EQ(c.quantization->matrices.describe(), "int8 groups of 16 (packed)");
  EXPECT_EQ(c.quantization->matrices.values_suffix, "_packed");
  json asym = cfg;
  asym["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"] = false;
  std::string r = error_of([&] { parse_hf_config(asym, "cfg"); });
  EXPECT_NE(r.find("asymmetric 8-bit pack-quantized weights (zero points) are not read yet"), std::string::npos) << r;
  json two = cfg;
  two["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 2;
  r = error_of([&] { parse_hf_config(two, "cfg"); });
  EXPECT_NE(r.find("weights.num_bits is 2; linnet reads 4 or 8"), std::string::npos) << r;
  // What it holds: one byte a weight and a scale per group (inspect's count: the file's words).
  const Generics g = bind_generics(c, RunOptions{1, 32, 1, 8, std::nullopt});
  for (const ParamSpec& p : parameter_specs(c, g))
    if (p.card_name == "layers[0].attention.q_proj.weight") {
      EXPECT_EQ(p.values_part().hf_name, "model.layers.0.self_attn.q_proj.weight_packed");
      EXPECT_EQ(p.values_part().full, (Shape{64, 16}));
      EXPECT_EQ(p.layout.bytes(p.full, DType::f32), 64 * 64 + 64 * 4 * 4);
    }
}
