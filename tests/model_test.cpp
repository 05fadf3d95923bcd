// The model's stateless entries against the float64 reference (docs/entries.md "Numbers").
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

// The CPU keeps bf16 and f16 matrices as stored and widens them as it reads them: the
// numbers are those of the same weights widened to f32 at load (the way before), to the
// rounding of a different summation order — log-probs come from f32 logits whatever T is.
TEST(CpuWeights, KeptAsStoredGiveWhatWidenedWeightsGive) {
  for (DType stored : {DType::bf16, DType::f16}) {
    ModelConfig c = tiny_config();
    c.dtype = stored;
    auto be = make_cpu_backend();
    EXPECT_EQ(be->weight_dtype(stored), stored);
    EXPECT_EQ(be->compute_dtype(stored), DType::f32);
    SingleCommunicator comm;
    RandomWeights w(11, stored);
    Model kept(c, bind_generics(c, RunOptions{2, 32, 1, 8, stored}), w, *be, comm);
    Model widened(c, bind_generics(c, RunOptions{2, 32, 1, 8, DType::f32}), w, *be, comm);
    const int64_t n = 20;
    std::vector<int64_t> tok(n), pos(n), seg(n), tgt(n);
    for (int64_t i = 0; i < n; ++i) {
      tok[i] = (i * 37 + 5) % c.vocab;
      pos[i] = i % 10;
      seg[i] = i / 10;
      tgt[i] = (i * 11 + 3) % c.vocab;
    }
    auto lp = [&](Model& m) {
      return m.log_probs_packed(Tensor::from_ints({n}, tok), Tensor::from_ints({n}, pos), Tensor::from_ints({n}, seg),
                                Tensor::from_ints({n}, tgt, DType::i64));
    };
    EXPECT_LT(rel_diff(lp(kept), lp(widened)), 1e-5) << dtype_name(stored);
    // Decoding (matrix-vector products) too.
    const Tensor a = kept.decode(ids({2, 1}, {5, 9}), 0), b = widened.decode(ids({2, 1}, {5, 9}), 0);
    EXPECT_LT(rel_diff(a.to(DType::f32), b.to(DType::f32)), stored == DType::bf16 ? 8e-3 : 1e-3) << dtype_name(stored);
  }
}
