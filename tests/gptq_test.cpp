// GPTQ and AWQ checkpoints (issue 37: quant_method "gptq" and "awq", 4 bits):
// quantization_config's reading, the parts named after the module and stored transposed (and
// how a shard slices them), the CPU kernels with the formats' f16 rounding against the dense
// product, and the refusals of bad checkpoints. Whole models against transformers + gptqmodel:
// tests/conformance_test.cpp (fixtures gptq_f16, gptq_asym_f16, awq_f16 at Shards 1, 2 and 4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "architectures/hf_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "fixture_edit_util.h"
#include "core/backend.h"
#include "core/cpu/group_order.h"
#include "core/cpu/packed_matmul.h"
#include "layers/generics.h"
#include "layers/parameters.h"

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

// A [rows, cols] matrix in GPTQ's v1 words: qweight [cols/8, rows] (eight input rows a word),
// scales [groups, rows] (f16 values, held f32), qzeros [groups, rows/8] (zero − 1 a nibble);
// and its dequantization f16((q − zero) · scale).
struct Words {
  Tensor qweight, scales, qzeros, dequantized;
};
Words gptq_words(int64_t rows, int64_t cols, int64_t group, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> q4(0, 15), z4(1, 15);  // (zero 0 carries in v1's word add)
  std::normal_distribution<float> nd;
  const int64_t groups = cols / group;
  Words out{Tensor::zeros({cols / 8, rows}, DType::i32), Tensor::empty({groups, rows}, DType::f32),
            Tensor::zeros({groups, rows / 8}, DType::i32), Tensor::empty({rows, cols}, DType::f32)};
  std::vector<int> zero(static_cast<size_t>(groups * rows));
  for (int64_t b = 0; b < groups; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      out.scales.ptr<float>()[b * rows + r] = f16_to_f32(f32_to_f16(std::fabs(nd(rng)) * 0.01f + 1e-4f));
      const int z = z4(rng);
      zero[static_cast<size_t>(b * rows + r)] = z;
      out.qzeros.ptr<uint32_t>()[b * (rows / 8) + r / 8] |= static_cast<uint32_t>(z - 1) << (4 * (r % 8));
    }
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) {
      const int q = q4(rng);
      out.qweight.ptr<uint32_t>()[(c / 8) * rows + r] |= static_cast<uint32_t>(q) << (4 * (c % 8));
      const int64_t b = (c / group) * rows + r;
      const float w = static_cast<float>(q - zero[static_cast<size_t>(b)]) * out.scales.ptr<float>()[b];
      out.dequantized.ptr<float>()[r * cols + c] = f16_to_f32(f32_to_f16(w));
    }
  return out;
}

}  // namespace

TEST(Gptq, ConfigIsReadOrRefusedByName) {
  const json fixture = json::parse(read_text(kGolden / "gptq_f16/config.json"));
  const ModelConfig c = parse_hf_config(fixture, "cfg");
  ASSERT_TRUE(c.quantization);
  EXPECT_EQ(c.quantization->method, "gptq");
  EXPECT_EQ(c.quantization->matrices.describe(), "gptq int4 groups of 16");
  EXPECT_TRUE(c.quantization->converts("model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(c.quantization->converts("lm_head"));
  auto refused = [&](const std::function<void(json&)>& edit) {
    json k = fixture;
    edit(k["quantization_config"]);
    return error_of([&] { parse_hf_config(k, "cfg"); });
  };
  std::string e = refused([](json& q) { q["bits"] = 2; });
  EXPECT_NE(e.find("quantization_config.bits 2 is not read yet"), std::string::npos) << e;
  e = refused([](json& q) { q["checkpoint_format"] = "marlin"; });
  EXPECT_NE(e.find("checkpoint_format 'marlin' is not read"), std::string::npos) << e;
  e = refused([](json& q) { q["lm_head"] = true; });
  EXPECT_NE(e.find("a GPTQ-quantized lm_head is not read yet"), std::string::npos) << e;
  e = refused([](json& q) { q["group_size"] = 0; });
  EXPECT_NE(e.find("group_size must be a positive integer or -1"), std::string::npos) << e;
  e = refused([](json& q) { q["modules_in_block_to_quantize"] = json::array({json::array({"self_attn.q_proj"})}); });
  EXPECT_NE(e.find("modules_in_block_to_quantize is not read yet"), std::string::npos) << e;
  json v2 = fixture, channel = fixture;
  v2["quantization_config"]["checkpoint_format"] = "gptq_v2";
  EXPECT_EQ(parse_hf_config(v2, "cfg").quantization->matrices.zero_point_word_add, 0u);
  EXPECT_EQ(c.quantization->matrices.zero_point_word_add, 0x11111111u);
  channel["quantization_config"]["group_size"] = -1;
  EXPECT_EQ(parse_hf_config(channel, "cfg").quantization->matrices.describe(), "gptq int4 per channel");
}

// Every part is named after the module and stored [columns, rows] of the matrix: a column-parallel
// matrix (split by rows) slices its parts' columns, a row-parallel one their rows.
TEST(Gptq, PartsAreNamedAfterTheModuleAndStoredTransposed) {
  const WeightLayout l = WeightLayout::gptq_groups(16, true);
  const ParamSpec q = matrix_spec("model.layers.0.self_attn.q_proj.weight", {64, 64}, Split::rows, 16, l);
  const ParamSpec v = q.values_part();
  EXPECT_EQ(v.hf_name, "model.layers.0.self_attn.q_proj.qweight");
  EXPECT_EQ(v.full, (Shape{8, 64}));
  EXPECT_EQ(v.split, Split::columns);
  EXPECT_EQ(v.shard_range(2), (std::pair<int64_t, int64_t>{32, 48}));
  const auto parts = q.companions();
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].hf_name, "model.layers.0.self_attn.q_proj.scales");
  EXPECT_EQ(parts[0].full, (Shape{4, 64}));
  EXPECT_EQ(parts[0].split, Split::columns);
  EXPECT_EQ(parts[1].hf_name, "model.layers.0.self_attn.q_proj.qzeros");
  EXPECT_EQ(parts[1].full, (Shape{4, 8}));
  EXPECT_EQ(parts[1].shard_range(2), (std::pair<int64_t, int64_t>{4, 6}));
  EXPECT_EQ(parts[2].hf_name, "model.layers.0.self_attn.q_proj.g_idx");
  EXPECT_EQ(parts[2].split, Split::mirrored);
  const ParamSpec o = matrix_spec("model.layers.0.self_attn.o_proj.weight", {64, 64}, Split::columns, 32, l);
  EXPECT_EQ(o.values_part().split, Split::rows);
  EXPECT_EQ(o.values_part().shard_range(1), (std::pair<int64_t, int64_t>{4, 8}));
  EXPECT_EQ(o.companions()[0].split, Split::rows);
  EXPECT_EQ(o.companions()[0].shard_range(1), (std::pair<int64_t, int64_t>{2, 4}));
  EXPECT_EQ(o.companions()[2].split, Split::rows);  // g_idx: the shard's columns
  // A slice must hold whole groups and whole words (8 input rows of qweight, 8 output columns of qzeros).
  EXPECT_EQ(l.slice_unit(0), 8);
  EXPECT_EQ(l.slice_unit(1), 16);
  const ParamSpec o4 = matrix_spec("model.layers.0.self_attn.o_proj.weight", {64, 64}, Split::columns, 16,
                              WeightLayout::gptq_groups(32, true));
  EXPECT_NE(error_of([&] { o4.check_blocks(4); }).find("o_proj.weight: the slice [0, 16) of dimension 1 (columns) of 64 "
                                                       "cuts a block of 32"),
            std::string::npos);
  // Counted as stored: half a byte a weight, f16 scales, i32 zero-point words and g_idx.
  EXPECT_EQ(l.bytes({64, 64}, DType::f16), 64 * 32 + 4 * 64 * 2 + 4 * 8 * 4 + 64 * 4);
}

TEST(Gptq, EveryKernelRoundsTheDequantizedWeightsToF16) {
  auto be = make_cpu_backend();
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (const int64_t group : {int64_t{16}, int64_t{32}, WeightLayout::kWhole}) {
    const int64_t o = 48, in = 96, g = std::min(group, in);
    const Words w = gptq_words(o, in, g, static_cast<uint32_t>(g));
    const Tensor q = be->upload_quantized_matrix({{w.qweight, w.scales, w.qzeros, in}}, WeightLayout::gptq_groups(group, true));
    ASSERT_EQ(q.shape(), (Shape{o, in}));
    const Tensor dense = be->upload_matrix(w.dequantized);
    std::vector<float> rows(static_cast<size_t>(o * in));
    cpu::unpack_rows_int4_f32(q.storage()->data, q.storage()->packed_rows, in, g, 0, o, rows.data(), DType::f16);
    EXPECT_EQ(rows, w.dequantized.to_floats()) << "group " << g;
    std::vector<float> xf(static_cast<size_t>(40 * in));
    for (auto& v : xf) v = nd(rng);
    const Tensor x = Tensor::from_floats({40, in}, xf);
    expect_every_kernel_gives_the_dense_product(x, dense, 0, o, [&](int64_t n, const char* k, float* out) {
      cpu::packed_matmul_int4(x.ptr<float>(), n, in, q.storage()->data, q.storage()->packed_rows, g, 0, o, out, k,
                              DType::f16);
    }, str("group ", g));
    Tensor got = Tensor::empty({3, o}, DType::f32), want = Tensor::empty({3, o}, DType::f32);
    be->matmul(x.rows(0, 3), q, nullptr, got);
    be->matmul(x.rows(0, 3), dense, nullptr, want);
    EXPECT_EQ(got.to_floats(), want.to_floats()) << "group " << g;
  }
  // v1's word add carries: a stored nibble 0xF (zero 0) reads as 0 and adds one to the next.
  Words w = gptq_words(8, 16, 16, 9);
  w.qzeros.ptr<uint32_t>()[0] = 0x1111111Fu;  // rows 0..7: zero − 1 = 0xF, then 1 each
  const Tensor q = be->upload_quantized_matrix({{w.qweight, w.scales, w.qzeros, 16}}, WeightLayout::gptq_groups(16, true));
  std::vector<float> rows(8 * 16);
  cpu::unpack_rows_int4_f32(q.storage()->data, q.storage()->packed_rows, 16, 16, 0, 8, rows.data(), DType::f16);
  const uint32_t word = 0x1111111Fu + 0x11111111u;  // 0x22222230: row 0 zero 0, row 1 zero 3, the rest 2
  for (int64_t r = 0; r < 8; ++r) {
    const int z = static_cast<int>((word >> (4 * r)) & 15u);
    const int qv = static_cast<int>(w.qweight.ptr<uint32_t>()[r] & 15u);
    EXPECT_EQ(rows[static_cast<size_t>(r * 16)], f16_to_f32(f32_to_f16(static_cast<float>(qv - z) * w.scales.ptr<float>()[r])))
        << "row " << r;
  }
}

// desc_act: g_idx names each column's group, the groups' columns scattered. The backend packs
// the columns in their groups' order and gathers x so (core/cpu/group_order.h): the product's
// bits are the dense product's on x and the weights taken in that order, for the whole matrix and
// for a row-parallel shard's slice of its columns (which holds part of every group: its runs are
// padded with zero columns).
TEST(Gptq, DescActColumnsArePutInTheirGroupsOrderAndXGatheredSo) {
  auto be = make_cpu_backend();
  const int64_t o = 48, in = 96, group = 16;
  // The matrix as GPTQ quantized it (groups of consecutive columns in its order), then stored
  // with column c holding the ordered matrix's column place[c].
  const Words ordered = gptq_words(o, in, group, 11);
  std::vector<int64_t> place(static_cast<size_t>(in));
  for (int64_t c = 0; c < in; ++c) place[static_cast<size_t>(c)] = c;
  std::shuffle(place.begin(), place.end(), std::mt19937(5));
  Tensor qweight = Tensor::zeros({in / 8, o}, DType::i32), dequantized = Tensor::empty({o, in}, DType::f32);
  std::vector<int64_t> g_idx(static_cast<size_t>(in));
  for (int64_t c = 0; c < in; ++c) {
    const int64_t from = place[static_cast<size_t>(c)];
    g_idx[static_cast<size_t>(c)] = from / group;
    for (int64_t r = 0; r < o; ++r) {
      const uint32_t q = (ordered.qweight.ptr<uint32_t>()[(from / 8) * o + r] >> (4 * (from % 8))) & 15u;
      qweight.ptr<uint32_t>()[(c / 8) * o + r] |= q << (4 * (c % 8));
      dequantized.ptr<float>()[r * in + c] = ordered.dequantized.ptr<float>()[r * in + from];
    }
  }
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  std::vector<float> xf(static_cast<size_t>(40 * in));
  for (auto& v : xf) v = nd(rng);
  const Tensor x = Tensor::from_floats({40, in}, xf);

  // Columns [c0, c1) of the matrix, as a shard of a row-parallel layer reads them: its qweight
  // words and g_idx sliced, every group's scales and zero points.
  auto check = [&](int64_t c0, int64_t c1, bool padded) {
    const int64_t k = c1 - c0;
    Backend::QuantizedPart part{qweight.rows(c0 / 8, c1 / 8), ordered.scales, ordered.qzeros, k};
    std::vector<int64_t> slice(g_idx.begin() + c0, g_idx.begin() + c1);
    part.group_index = Tensor::from_ints({k}, slice);
    const Tensor q = be->upload_quantized_matrix({part}, WeightLayout::gptq_groups(group, true));
    ASSERT_EQ(q.shape(), (Shape{o, k}));
    const std::vector<int32_t>& gather = q.storage()->column_gather;
    ASSERT_EQ(static_cast<int64_t>(gather.size()), q.storage()->packed_cols);
    // Every column once, in its group's order (−1: padding), the groups consecutive.
    std::vector<int> seen(static_cast<size_t>(k));
    int64_t last_group = -1, pads = 0;
    for (const int32_t c : gather) {
      if (c < 0) { ++pads; continue; }
      ++seen[static_cast<size_t>(c)];
      EXPECT_GE(slice[static_cast<size_t>(c)], last_group);
      last_group = slice[static_cast<size_t>(c)];
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), k);
    EXPECT_EQ(pads > 0, padded) << "columns [" << c0 << ", " << c1 << ")";
    // The dense product on the gathered x and the weights in that order: the same bits.
    const int64_t kp = static_cast<int64_t>(gather.size());
    Tensor xg = Tensor::zeros({40, kp}, DType::f32), wg = Tensor::zeros({o, kp}, DType::f32);
    for (int64_t j = 0; j < kp; ++j) {
      const int32_t c = gather[static_cast<size_t>(j)];
      if (c < 0) continue;
      for (int64_t n = 0; n < 40; ++n) xg.ptr<float>()[n * kp + j] = xf[static_cast<size_t>(n * in + c0 + c)];
      for (int64_t r = 0; r < o; ++r) wg.ptr<float>()[r * kp + j] = dequantized.ptr<float>()[r * in + c0 + c];
    }
    Tensor xs = Tensor::empty({40, k}, DType::f32);
    for (int64_t n = 0; n < 40; ++n)
      for (int64_t c = 0; c < k; ++c) xs.ptr<float>()[n * k + c] = xf[static_cast<size_t>(n * in + c0 + c)];
    for (const int64_t rows : {int64_t{1}, int64_t{3}, int64_t{40}}) {
      Tensor got = Tensor::empty({rows, o}, DType::f32), want = Tensor::empty({rows, o}, DType::f32);
      be->matmul(xs.rows(0, rows), q, nullptr, got);
      be->matmul(xg.rows(0, rows), be->upload_matrix(wg), nullptr, want);
      EXPECT_EQ(got.to_floats(), want.to_floats()) << "columns [" << c0 << ", " << c1 << "), " << rows << " rows";
    }
    // And within f32's reordering of the sum of the product in the stored order.
    Tensor got = Tensor::empty({40, o}, DType::f32), plain = Tensor::empty({40, o}, DType::f32);
    Tensor ws = Tensor::empty({o, k}, DType::f32);
    for (int64_t r = 0; r < o; ++r)
      for (int64_t c = 0; c < k; ++c) ws.ptr<float>()[r * k + c] = dequantized.ptr<float>()[r * in + c0 + c];
    be->matmul(xs, q, nullptr, got);
    be->matmul(xs, be->upload_matrix(ws), nullptr, plain);
    const auto a = got.to_floats(), b = plain.to_floats();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4f * (1.0f + std::fabs(b[i]))) << i;
  };
  check(0, in, false);   // the whole matrix: each group's 16 columns, no padding
  check(32, 80, true);   // a shard's 48 columns: parts of every group, padded
  check(0, 48, true);

  // Parts of one matrix with one order: another refused.
  Backend::QuantizedPart a{qweight, ordered.scales, ordered.qzeros, in}, b = a;
  a.group_index = Tensor::from_ints({in}, g_idx);
  std::vector<int64_t> other = g_idx;
  const auto j = std::find_if(other.begin(), other.end(), [&](int64_t v) { return v != other[0]; });
  ASSERT_NE(j, other.end());
  std::swap(other[0], *j);
  b.group_index = Tensor::from_ints({in}, other);
  EXPECT_NE(error_of([&] { be->upload_quantized_matrix({a, b}, WeightLayout::gptq_groups(group, true)); })
                .find("parts of one matrix with different column orders"),
            std::string::npos);
}

TEST(Gptq, GroupOrderPadsEachRunToItsSubGroups) {
  // Whole groups in any order: no padding, a scale per group.
  cpu::GroupOrder o = cpu::group_order({1, 0, 1, 0, 0, 1, 1, 0}, 2, 4, 4);
  EXPECT_EQ(o.sub, 4);
  EXPECT_EQ(o.gather, (std::vector<int32_t>{1, 3, 4, 7, 0, 2, 5, 6}));
  EXPECT_EQ(o.group_of, (std::vector<int32_t>{0, 1}));
  // A slice with runs of 5, 3 and 1 columns of groups of 16: sub-groups of 8, the last run unpadded.
  std::vector<int32_t> g = {2, 0, 0, 0, 0, 2, 0, 5, 5, 2};
  o = cpu::group_order(g, 6, 16, 4);
  EXPECT_EQ(o.sub, 8);
  EXPECT_EQ(o.gather, (std::vector<int32_t>{1, 2, 3, 4, 6, -1, -1, -1, 0, 5, 9, -1, -1, -1, -1, -1, 7, 8}));
  EXPECT_EQ(o.group_of, (std::vector<int32_t>{0, 2, 5}));
  // Applied: values gathered, padding at the group's zero point, scales per sub-group.
  std::vector<uint8_t> values(20), zeros = {9, 9, 9, 7, 9, 9, 9, 9, 9, 9, 9, 4};
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint8_t>(i % 16);
  std::vector<float> scales = {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15};
  cpu::apply_group_order(o, 2, 10, 6, values, scales, zeros, 0);
  EXPECT_EQ(scales, (std::vector<float>{0, 2, 5, 10, 12, 15}));
  EXPECT_EQ(zeros, (std::vector<uint8_t>{9, 9, 9, 9, 9, 4}));
  ASSERT_EQ(values.size(), 36u);
  EXPECT_EQ(values[5], 9);   // row 0's padding in group 0: its zero point
  EXPECT_EQ(values[8], 0);   // column 0
  EXPECT_EQ(values[18 + 0], 11);  // row 1, column 1
  EXPECT_EQ(values[18 + 12], 9);  // row 1's padding in group 2
}

TEST(Gptq, BadCheckpointsAreRefusedNamingFileTensorAndRule) {
  const fs::path sym = kGolden / "gptq_f16";
  const std::string m = "model.layers.1.self_attn.k_proj";
  {  // desc_act: k's g_idx reorders the groups, q's and v's do not (one matrix q|k|v: one order)
    ScratchDir d;
    std::vector<int64_t> g(64);
    for (int64_t i = 0; i < 64; ++i) g[static_cast<size_t>(i)] = (i * 5 % 64) / 16;
    edited_fixture(sym, d, [](json& j) { j["quantization_config"]["desc_act"] = true; },
                   {{m + ".g_idx", Tensor::from_ints({64}, g)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find(m + ".g_idx orders the columns' groups unlike model.layers.1.self_attn.q_proj.g_idx, stacked with "
                         "it into one matrix"),
              std::string::npos)
        << e;
  }
  {  // a g_idx out of range
    ScratchDir d;
    std::vector<int64_t> g(64);
    for (int64_t i = 0; i < 64; ++i) g[static_cast<size_t>(i)] = i / 16;
    g[4] = 9;
    edited_fixture(sym, d, [](json&) {}, {{m + ".g_idx", Tensor::from_ints({64}, g)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find(m + ".g_idx: column 4 is in group 9, outside the matrix's 4 groups [0, 4) of 16 columns"),
              std::string::npos)
        << e;
  }
  {  // packed ints of the wrong count
    ScratchDir d;
    edited_fixture(sym, d, [](json&) {}, {{m + ".qweight", Tensor::zeros({7, 32}, DType::i32)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find(m + ".qweight"), std::string::npos) << e;
    EXPECT_NE(e.find("[8, 32]"), std::string::npos) << e;
  }
  {  // values in another dtype
    ScratchDir d;
    edited_fixture(sym, d, [](json&) {}, {{m + ".qweight", Tensor::zeros({8, 32}, DType::f32)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor '" + m + ".qweight' is stored as f32, but quantization_config (gptq int4 groups of 16) "
                     "stores it as i32"),
              std::string::npos)
        << e;
  }
  {  // a NaN scale
    ScratchDir d;
    SafetensorsFile f((sym / "model.safetensors").string());
    Tensor s = f.read(m + ".scales").to(DType::f32);
    s.ptr<float>()[33] = std::nanf("");
    edited_fixture(sym, d, [](json&) {}, {{m + ".scales", s.to(DType::f16)}});
    const std::string e = load_error(d);
    EXPECT_NE(e.find("tensor '" + m + ".scales' holds NaN at [1, 1]"), std::string::npos) << e;
  }
  {  // a missing part
    ScratchDir d;
    SafetensorsFile f((sym / "model.safetensors").string());
    std::vector<std::pair<std::string, Tensor>> kept;
    for (const auto& n : f.names())
      if (n != m + ".qzeros") kept.emplace_back(n, f.read(n));
    std::ofstream(d / "config.json") << read_text(sym / "config.json");
    save_safetensors(d / "model.safetensors", kept);
    const std::string e = load_error(d);
    EXPECT_NE(e.find(m + ".qzeros"), std::string::npos) << e;
  }
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  EXPECT_NO_THROW(load_model(sym.string(), RunOptions{}, *be, comm));
}

namespace {

// A [rows, cols] matrix in AWQ's gemm words: qweight [cols, rows/8] and qzeros [groups, rows/8],
// nibble k of a word holding row 8c + [0, 2, 4, 6, 1, 3, 5, 7][k]; scales [groups, rows]; its
// dequantization f16((q − zero) · scale).
Words awq_words(int64_t rows, int64_t cols, int64_t group, uint32_t seed) {
  static constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> q4(0, 15);
  std::normal_distribution<float> nd;
  const int64_t groups = cols / group, rw = rows / 8;
  Words out{Tensor::zeros({cols, rw}, DType::i32), Tensor::empty({groups, rows}, DType::f32),
            Tensor::zeros({groups, rw}, DType::i32), Tensor::empty({rows, cols}, DType::f32)};
  std::vector<int> zero(static_cast<size_t>(groups * rows)), q(static_cast<size_t>(rows * cols));
  for (auto& z : zero) z = q4(rng);
  for (auto& v : q) v = q4(rng);
  for (int64_t b = 0; b < groups; ++b)
    for (int64_t r = 0; r < rows; ++r)
      out.scales.ptr<float>()[b * rows + r] = f16_to_f32(f32_to_f16(std::fabs(nd(rng)) * 0.01f + 1e-4f));
  for (int64_t c8 = 0; c8 < rw; ++c8)
    for (int k = 0; k < 8; ++k) {
      const int64_t r = c8 * 8 + kOrder[k];
      for (int64_t b = 0; b < groups; ++b)
        out.qzeros.ptr<uint32_t>()[b * rw + c8] |= static_cast<uint32_t>(zero[static_cast<size_t>(b * rows + r)]) << (4 * k);
      for (int64_t c = 0; c < cols; ++c)
        out.qweight.ptr<uint32_t>()[c * rw + c8] |= static_cast<uint32_t>(q[static_cast<size_t>(r * cols + c)]) << (4 * k);
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t b = (c / group) * rows + r;
      const float w = static_cast<float>(q[static_cast<size_t>(r * cols + c)] - zero[static_cast<size_t>(b)]) *
                      out.scales.ptr<float>()[b];
      out.dequantized.ptr<float>()[r * cols + c] = f16_to_f32(f32_to_f16(w));
    }
  return out;
}

}  // namespace

TEST(Awq, ConfigIsReadOrRefusedByName) {
  const json fixture = json::parse(read_text(kGolden / "awq_f16/config.json"));
  const ModelConfig c = parse_hf_config(fixture, "cfg");
  ASSERT_TRUE(c.quantization);
  EXPECT_EQ(c.quantization->method, "awq");
  EXPECT_EQ(c.quantization->matrices.describe(), "awq int4 groups of 32");
  EXPECT_FALSE(c.quantization->converts("lm_head"));
  auto refused = [&](const std::function<void(json&)>& edit) {
    json k = fixture;
    edit(k["quantization_config"]);
    return error_of([&] { parse_hf_config(k, "cfg"); });
  };
  std::string e = refused([](json& q) { q["version"] = "gemv"; });
  EXPECT_NE(e.find("quantization_config.version \"gemv\" is not read yet"), std::string::npos) << e;
  e = refused([](json& q) { q["zero_point"] = false; });
  EXPECT_NE(e.find("zero_point false is not read"), std::string::npos) << e;
  e = refused([](json& q) { q["bits"] = 3; });
  EXPECT_NE(e.find("bits 3 is not read"), std::string::npos) << e;
}

// AWQ's values are packed along the output rows, so a column-parallel matrix's slice must hold
// whole words of 8 rows; every kernel gives the dense product on the f16-rounded weights.
TEST(Awq, ValuesPackedAlongTheRowsWithInterleavedNibbles) {
  const WeightLayout l = WeightLayout::awq_groups(32);
  const ParamSpec q = matrix_spec("model.layers.0.self_attn.q_proj.weight", {64, 128}, Split::rows, 16, l);
  const ParamSpec v = q.values_part();
  EXPECT_EQ(v.hf_name, "model.layers.0.self_attn.q_proj.qweight");
  EXPECT_EQ(v.full, (Shape{128, 8}));
  EXPECT_EQ(v.split, Split::columns);
  EXPECT_EQ(v.shard_range(1), (std::pair<int64_t, int64_t>{2, 4}));
  EXPECT_EQ(q.companions().size(), 2u);  // scales, qzeros: no g_idx
  EXPECT_EQ(l.slice_unit(0), 8);
  EXPECT_EQ(l.slice_unit(1), 32);
  EXPECT_EQ(l.bytes({64, 128}, DType::f16), 64 * 64 + 4 * 64 * 2 + 4 * 8 * 4);

  auto be = make_cpu_backend();
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int64_t o = 48, in = 96;
  const Words w = awq_words(o, in, 32, 4);
  const Tensor m = be->upload_quantized_matrix({{w.qweight, w.scales, w.qzeros, in}}, l);
  const Tensor dense = be->upload_matrix(w.dequantized);
  std::vector<float> rows(static_cast<size_t>(o * in));
  cpu::unpack_rows_int4_f32(m.storage()->data, m.storage()->packed_rows, in, 32, 0, o, rows.data(), DType::f16);
  EXPECT_EQ(rows, w.dequantized.to_floats());
  std::vector<float> xf(static_cast<size_t>(40 * in));
  for (auto& x : xf) x = nd(rng);
  const Tensor x = Tensor::from_floats({40, in}, xf);
  expect_every_kernel_gives_the_dense_product(x, dense, 0, o, [&](int64_t n, const char* k, float* out) {
    cpu::packed_matmul_int4(x.ptr<float>(), n, in, m.storage()->data, m.storage()->packed_rows, 32, 0, o, out, k,
                            DType::f16);
  }, "awq");
}

// 8-bit GPTQ (Qwen's -GPTQ-Int8): four values a word along the input rows, zero points four
// output columns a word (v1: each word + 0x01010101), symmetric (zero 128). Read into int8's
// one-byte panels as q − 128, each weight rounded to f16 after the product with its f16 scale,
// as gptqmodel does; a zero point other than 128 is refused. The whole model: gptq_int8_f16.
TEST(Gptq, EightBitsAreInt8PanelsRoundedToF16) {
  auto be = make_cpu_backend();
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> q8(0, 255);
  std::normal_distribution<float> nd;
  const int64_t o = 40, in = 64, group = 16, groups = in / group;
  Tensor qweight = Tensor::zeros({in / 4, o}, DType::i32), scales = Tensor::empty({groups, o}, DType::f32),
         qzeros = Tensor::zeros({groups, o / 4}, DType::i32), dequantized = Tensor::empty({o, in}, DType::f32);
  for (int64_t b = 0; b < groups; ++b)
    for (int64_t r = 0; r < o; ++r) {
      scales.ptr<float>()[b * o + r] = f16_to_f32(f32_to_f16(std::fabs(nd(rng)) * 0.001f + 1e-4f));
      qzeros.ptr<uint32_t>()[b * (o / 4) + r / 4] |= uint32_t{127} << (8 * (r % 4));  // v1: zero − 1
    }
  for (int64_t c = 0; c < in; ++c)
    for (int64_t r = 0; r < o; ++r) {
      const int q = q8(rng);
      qweight.ptr<uint32_t>()[(c / 4) * o + r] |= static_cast<uint32_t>(q) << (8 * (c % 4));
      dequantized.ptr<float>()[r * in + c] =
          f16_to_f32(f32_to_f16(static_cast<float>(q - 128) * scales.ptr<float>()[(c / group) * o + r]));
    }
  const WeightLayout l = WeightLayout::gptq_groups(group, true, 8);
  EXPECT_EQ(l.describe(), "gptq int8 groups of 16");
  EXPECT_EQ(l.values_of({o, in}).shape, (Shape{in / 4, o}));
  const Tensor q = be->upload_quantized_matrix({{qweight, scales, qzeros, in}}, l);
  ASSERT_EQ(q.shape(), (Shape{o, in}));
  std::vector<float> rows(static_cast<size_t>(o * in));
  cpu::unpack_rows_int8_f32(q.storage()->data, q.storage()->packed_rows, in, group, 0, o, rows.data(), DType::f16);
  EXPECT_EQ(rows, dequantized.to_floats());
  std::vector<float> xf(static_cast<size_t>(40 * in));
  for (auto& v : xf) v = nd(rng);
  const Tensor x = Tensor::from_floats({40, in}, xf), dense = be->upload_matrix(dequantized);
  expect_every_kernel_gives_the_dense_product(x, dense, 0, o, [&](int64_t n, const char* k, float* out) {
    cpu::packed_matmul_int8(x.ptr<float>(), n, in, q.storage()->data, q.storage()->packed_rows, group, 0, o, out, k,
                            DType::f16);
  }, "gptq int8");
  Tensor got = Tensor::empty({3, o}, DType::f32), want = Tensor::empty({3, o}, DType::f32);
  be->matmul(x.rows(0, 3), q, nullptr, got);
  be->matmul(x.rows(0, 3), dense, nullptr, want);
  EXPECT_EQ(got.to_floats(), want.to_floats());
  // A zero point that is not 128 (asymmetric): refused, naming it.
  qzeros.ptr<uint32_t>()[1] = 0x7f7f7f00u;
  const std::string e = error_of([&] { be->upload_quantized_matrix({{qweight, scales, qzeros, in}}, l); });
  EXPECT_NE(e.find("8-bit zero point 1 at row 4, group 0"), std::string::npos) << e;

  // The config: 8 bits read, asymmetric 8 bits and other widths refused by name.
  json cfg = json::parse(read_text(fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden/gptq_int8_f16/config.json"));
  EXPECT_EQ(parse_hf_config(cfg, "cfg").quantization->matrices.describe(), "gptq int8 groups of 16");
  cfg["quantization_config"]["sym"] = false;
  std::string r = error_of([&] { parse_hf_config(cfg, "cfg"); });
  EXPECT_NE(r.find("8-bit GPTQ with zero points other than 128 is not read yet"), std::string::npos) << r;
  cfg["quantization_config"]["bits"] = 3;
  r = error_of([&] { parse_hf_config(cfg, "cfg"); });
  EXPECT_NE(r.find("quantization_config.bits 3 is not read yet (linnet reads 4- and 8-bit GPTQ"), std::string::npos) << r;
}
