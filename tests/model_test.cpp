// The model's stateless entries against the float64 reference (SPEC §6).
#include <gtest/gtest.h>

#include "model_fixtures.h"
#include "reference_llama.h"

using namespace linnet;
using namespace linnet::testing;

TEST(Model, ForwardMatchesFloat64Reference) {
  for (bool bias : {false, true}) {
    ModelConfig c = tiny_config();
    c.qkv_bias = c.o_bias = c.mlp_bias = bias;
    TinyModel m(c);
    RandomWeights w(7);
    ReferenceLlama ref(c, w);
    const std::vector<int64_t> t0 = {1, 5, 9, 33, 96, 0, 12}, t1 = {4, 4, 4, 70, 2, 8, 50};
    Tensor logits = m->forward(ids({2, 7}, [&] { auto v = t0; v.insert(v.end(), t1.begin(), t1.end()); return v; }()));
    ASSERT_EQ(logits.shape(), (Shape{2, 7, c.vocab}));
    std::vector<int64_t> pos = {0, 1, 2, 3, 4, 5, 6};
    auto r0 = ref.run(t0, pos), r1 = ref.run(t1, pos);
    r0.insert(r0.end(), r1.begin(), r1.end());
    std::vector<float> rf(r0.begin(), r0.end());
    EXPECT_LT(rel_diff(logits, Tensor::from_floats(logits.shape(), rf)), 1e-5) << "bias " << bias;
  }
}
