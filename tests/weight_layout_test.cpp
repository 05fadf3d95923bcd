// Matrix weight layouts (core/weight_layout.h): the traits table, byte counts, companion tensors
// derived from a matrix's split (layers/parameters.h), block boundaries, and the refusal of a
// format a backend does not support. Dense weights count as before.
#include <gtest/gtest.h>

#include "core/backend.h"
#include "core/error.h"
#include "core/profiling_backend.h"
#include "core/weight_layout.h"
#include "layers/footprint.h"
#include "layers/parameters.h"
#include "model_fixtures.h"

using namespace linnet;

namespace {

// The message of what f throws ("" when it does not).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A made-up block layout: 64 × 128 blocks, 8-bit values, f32 scales, i32 zero points, g_idx.
WeightLayout blocked() {
  WeightLayout l;
  l.block_rows = 64;
  l.block_cols = 128;
  l.data_bits = 8;
  l.scale_dtype = DType::f32;
  l.zero_point_dtype = DType::i32;
  l.group_index = true;
  return l;
}

ParamSpec matrix(Split split, Shape full, int64_t per_shard, WeightLayout layout) {
  ParamSpec p;
  p.hf_name = "model.layers.0.mlp.up_proj.weight";
  p.card_name = "layers[0].mlp.up.weight";
  p.full = std::move(full);
  p.split = split;
  p.per_shard = per_shard;
  p.layout = std::move(layout);
  return p;
}

}  // namespace

TEST(WeightLayout, DenseIsOneByOneBlocksWithNothingBeside) {
  const WeightFormatTraits& t = weight_format_traits(WeightFormat::dense);
  EXPECT_STREQ(t.name, "dense");
  EXPECT_EQ(t.block_rows, 1);
  EXPECT_EQ(t.block_cols, 1);
  EXPECT_FALSE(t.scale_dtype || t.zero_point_dtype || t.group_index);
  const WeightLayout d = WeightLayout::of(WeightFormat::dense);
  EXPECT_TRUE(d.dense());
  EXPECT_TRUE(WeightLayout{}.dense());
  EXPECT_TRUE(d.companions_of({96, 32}).empty());
  for (DType dt : {DType::bf16, DType::f16, DType::f32})
    EXPECT_EQ(d.bytes({96, 32}, dt), 96 * 32 * static_cast<int64_t>(dtype_size(dt)));
  EXPECT_FALSE(blocked().dense());
}

TEST(WeightLayout, BytesCountTheValuesAndEveryCompanion) {
  // [256, 300] in 64 × 128 blocks: 4 × 3 blocks (the last column block partial).
  const WeightLayout l = blocked();
  const auto c = l.companions_of({256, 300});
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].suffix, "_scale");
  EXPECT_EQ(c[0].shape, (Shape{4, 3}));
  EXPECT_EQ(c[0].dtype, DType::f32);
  EXPECT_EQ(c[1].suffix, "_zero_point");
  EXPECT_EQ(c[1].shape, (Shape{4, 3}));
  EXPECT_EQ(c[2].suffix, "_g_idx");
  EXPECT_EQ(c[2].shape, (Shape{300}));
  EXPECT_EQ(c[2].dtype, DType::i32);
  EXPECT_EQ(l.data_bytes({256, 300}, DType::bf16), 256 * 300);
  EXPECT_EQ(l.bytes({256, 300}, DType::bf16), 256 * 300 + 12 * 4 + 12 * 4 + 300 * 4);
  // 4-bit values: half a byte each, whole bytes per row.
  WeightLayout four = l;
  four.data_bits = 4;
  EXPECT_EQ(four.data_bytes({2, 5}, DType::bf16), 2 * 3);
}

TEST(WeightLayout, ASliceThatCutsABlockIsRefusedNamingTensorDimensionAndBlock) {
  const WeightLayout l = blocked();
  EXPECT_EQ(error_of([&] { check_block_boundaries("w", l, 0, 64, 128, 256); }), "");
  EXPECT_EQ(error_of([&] { check_block_boundaries("w", l, 0, 192, 200, 200); }), "");  // ends at the extent
  const std::string e = error_of([&] { check_block_boundaries("model.x.weight", l, 1, 0, 96, 300); });
  EXPECT_NE(e.find("model.x.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("dimension 1 (columns)"), std::string::npos) << e;
  EXPECT_NE(e.find("block of 128"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { check_block_boundaries("w", l, 0, 32, 64, 256); }).find("block of 64"), std::string::npos);
}

TEST(ParamSpecCompanions, RowSplitScalesFollowTheMatrixRangeDividedByTheBlock) {
  // 512 rows over 4 shards (128 each) in 64-row blocks: each shard reads 2 scale rows.
  const ParamSpec p = matrix(Split::rows, {512, 256}, 128, blocked());
  const auto c = p.companions();
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].hf_name, "model.layers.0.mlp.up_proj.weight_scale");
  EXPECT_EQ(c[0].card_name, "layers[0].mlp.up.weight_scale");
  EXPECT_EQ(c[0].full, (Shape{8, 2}));
  EXPECT_EQ(c[0].split, Split::rows);
  EXPECT_EQ(c[0].dtype, DType::f32);
  EXPECT_TRUE(c[0].layout.dense());
  EXPECT_EQ(c[0].shard_shape(), (Shape{2, 2}));
  EXPECT_EQ(c[1].hf_name, "model.layers.0.mlp.up_proj.weight_zero_point");
  for (int64_t s = 0; s < 4; ++s) {
    const auto [b, e] = p.shard_range(s);
    EXPECT_EQ(c[0].shard_range(s), (std::pair<int64_t, int64_t>{b / 64, (e + 63) / 64})) << s;
    EXPECT_EQ(c[1].shard_range(s), c[0].shard_range(s));
  }
  // g_idx names the group of each input column: every row shard needs all of it.
  EXPECT_EQ(c[2].hf_name, "model.layers.0.mlp.up_proj.weight_g_idx");
  EXPECT_EQ(c[2].full, (Shape{256}));
  EXPECT_EQ(c[2].split, Split::mirrored);
  EXPECT_NO_THROW(p.check_blocks(4));
}

TEST(ParamSpecCompanions, ColumnSplitScalesAndGroupIndexFollowTheColumns) {
  WeightLayout l = blocked();
  l.block_rows = 1;
  const ParamSpec p = matrix(Split::columns, {96, 512}, 256, l);
  const auto c = p.companions();
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].full, (Shape{96, 4}));
  EXPECT_EQ(c[0].split, Split::columns);
  EXPECT_EQ(c[0].shard_shape(), (Shape{96, 2}));
  EXPECT_EQ(c[2].split, Split::rows);  // g_idx's one dimension is the columns
  EXPECT_EQ(c[2].shard_shape(), (Shape{256}));
  for (int64_t s = 0; s < 2; ++s) {
    const auto [b, e] = p.shard_range(s);
    EXPECT_EQ(c[0].shard_range(s), (std::pair<int64_t, int64_t>{b / 128, e / 128}));
    EXPECT_EQ(c[2].shard_range(s), p.shard_range(s));
  }
}

TEST(ParamSpecCompanions, AFusedPartsScalesStartAtItsBlock) {
  // Rows 128…255 of a fused [384, 256] tensor, in 64-row blocks: scale rows 2…3 of 6.
  ParamSpec p = matrix(Split::rows, {128, 256}, 64, blocked());
  p.stored = {384, 256};
  p.row_offset = 128;
  const auto c = p.companions();
  EXPECT_EQ(c[0].stored_shape(), (Shape{6, 2}));
  EXPECT_EQ(c[0].row_offset, 2);
  EXPECT_EQ(c[0].full, (Shape{2, 2}));
  EXPECT_NO_THROW(p.check_blocks(2));
  p.row_offset = 96;
  EXPECT_NE(error_of([&] { p.check_blocks(2); }).find("block of 64"), std::string::npos);
}

TEST(ParamSpecCompanions, ASplitThatCutsABlockIsRefusedBeforeAnyRead) {
  // 384 rows over 4 shards: 96 each, not whole 64-row blocks.
  const std::vector<ParamSpec> specs = {matrix(Split::rows, {384, 256}, 96, blocked())};
  const std::string e = error_of([&] { check_weight_layouts(specs, 4, [](WeightFormat) { return true; }, "cpu"); });
  EXPECT_NE(e.find("model.layers.0.mlp.up_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("dimension 0 (rows)"), std::string::npos) << e;
  EXPECT_NE(e.find("block of 64"), std::string::npos) << e;
  // One shard holds it whole: nothing is cut.
  EXPECT_NO_THROW(check_weight_layouts({matrix(Split::rows, {384, 256}, 384, blocked())}, 1,
                                       [](WeightFormat) { return true; }, "cpu"));
}

TEST(WeightFormats, BackendsSupportDenseAndTheLoaderRefusesWhatOneDoesNot) {
  auto cpu = make_cpu_backend();
  EXPECT_TRUE(cpu->supports(WeightFormat::dense));
  ProfilingBackend profiled(*cpu);
  EXPECT_TRUE(profiled.supports(WeightFormat::dense));
  const std::vector<ParamSpec> specs = {matrix(Split::rows, {128, 256}, 64, WeightLayout{})};
  EXPECT_NO_THROW(check_weight_layouts(specs, 2, [&](WeightFormat f) { return cpu->supports(f); }, cpu->name()));
  const std::string e = error_of([&] { check_weight_layouts(specs, 2, [](WeightFormat) { return false; }, "test"); });
  EXPECT_EQ(e, "model.layers.0.mlp.up_proj.weight is stored as dense, which the test backend does not support");
}

TEST(WeightFormats, DenseBytesAreNumelTimesTheDtypeAsBefore) {
  // Every parameter of a model at 1 and 2 shards, matrices in bf16 and the rest in f32: the
  // layout's count is the old one (numel × bytes per value), and so is the footprint's sum.
  const ModelConfig c = linnet::testing::tiny_config();
  for (int64_t shards : {1, 2}) {
    const Generics g = bind_generics(c, RunOptions{1, 32, shards, 8, std::nullopt});
    int64_t sum = 0;
    for (const auto& p : parameter_specs(c, g)) {
      EXPECT_TRUE(p.layout.dense()) << p.card_name;
      EXPECT_TRUE(p.companions().empty()) << p.card_name;
      const int64_t old = p.shard_shape().numel() * held_bytes_per_value(c, p, DType::f32, DType::bf16);
      EXPECT_EQ(held_bytes(c, p, DType::f32, DType::bf16), old) << p.card_name;
      if (p.card_name != "lm_head.weight" || !c.tie_word_embeddings) sum += old;
    }
    EXPECT_EQ(rank_footprint(c, g, DType::f32, DType::bf16).parameters, sum);
    // A blocked layout counts its scales on top of the values.
    ParamSpec q = parameter_specs(c, g)[0];
    q.layout = blocked();
    EXPECT_EQ(held_bytes(c, q, DType::f32, DType::bf16), q.layout.bytes(q.shard_shape(), DType::bf16));
  }
}
