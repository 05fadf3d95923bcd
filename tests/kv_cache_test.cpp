// The network's state, described per layer (layers/kv_cache.h, layers/cache_layout.h): what each
// kind allocates, that the footprint counts by the same description, and that the cache a model
// holds is the one its entries write.
#include <gtest/gtest.h>

#include "layers/model_definition.h"
#include "layers/footprint.h"
#include "model_fixtures.h"

namespace linnet::testing {

TEST(KvCache, EachKindHoldsWhatItsDescriptionSays) {
  auto be = make_cpu_backend();
  using K = LayerCacheSpec::Kind;
  const std::vector<LayerCacheSpec> specs = {{K::heads, 2, 8, true}, {K::latent, 0, 24, false}, {K::none, 0, 0, true}};
  KvCache cache(*be, specs, 3, 16, DType::f32, 3);
  ASSERT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.layer(0).k.shape(), (Shape{3, 2, 16, 8}));
  EXPECT_EQ(cache.layer(0).v.shape(), (Shape{3, 2, 16, 8}));
  // Latent: one KV head whose keys are its values (layers/latent_attention.h): one tensor, both names.
  EXPECT_EQ(cache.layer(1).k.shape(), (Shape{3, 1, 16, 24}));
  EXPECT_EQ(cache.layer(1).v.data(), cache.layer(1).k.data());
  EXPECT_FALSE(cache.layer(2).k.defined());
  EXPECT_FALSE(cache.layer(2).v.defined());
  EXPECT_EQ(specs[0].values_per_slot(), 2 * 2 * 8);
  EXPECT_EQ(specs[1].values_per_slot(), 24);
  EXPECT_EQ(specs[2].values_per_slot(), 0);
  EXPECT_EQ(cache.bytes(), (2 * 3 * 2 * 16 * 8 + 3 * 16 * 24) * 4);
  const auto snap = cache.snapshot(*be);
  ASSERT_EQ(snap.size(), 3u);  // k, v of layer 0; layer 1's one tensor
  for (const auto& t : snap)
    for (float v : t.to_floats()) EXPECT_EQ(v, 0.0f);
}

TEST(KvCache, TheFootprintCountsWhatTheNetworkHolds) {
  // GQA at Shards 1 and 2, and KV heads replicated at Shards 4 (> KvHeads = 2).
  for (int64_t shards : {1, 2, 4}) {
    const ModelConfig c = tiny_config();
    const Generics g = bind_generics(c, RunOptions{4, 32, shards, 8, std::nullopt});
    const auto specs = layer_states(c, g);
    ASSERT_EQ(static_cast<int64_t>(specs.size()), g.layers);
    for (const auto& s : specs) {
      EXPECT_EQ(s.heads, shards == 4 ? 1 : 2 / shards);
      EXPECT_EQ(s.sharded, shards != 4) << "replicated past KvHeads";
    }
    auto be = make_cpu_backend();
    const KvCache cache(*be, specs, g.batch, g.max_seq, DType::f32, g.state_rows());
    EXPECT_EQ(rank_footprint(c, g, DType::f32).kv_cache, cache.bytes()) << "Shards " << shards;
  }
}

TEST(KvCache, TheModelsEntriesWriteTheNetworksCache) {
  TinyModel m;
  const auto before = m->cache_snapshot();
  ASSERT_EQ(static_cast<int64_t>(before.size()), 2 * m.g.layers);
  m->prefill(ids({4, 3}, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}), 0);  // [Batch, S]
  const auto after = m->cache_snapshot();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_GT(rel_diff(after[i], before[i]), 0.0) << "tensor " << i;
}

}  // namespace linnet::testing
