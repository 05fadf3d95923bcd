// Batch invariance (docs/numerics.md): a sequence's results are the same bits whatever shares
// its call — alone, or among 1, 3, 15 or 63 others of mixed lengths, wherever it sits in the
// call and whichever cache row or pages it has. Bitwise, not within a tolerance.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <random>

#include "engine/evaluator.h"
#include "engine/generator.h"
#include "layers/model.h"
#include "model_fixtures.h"

using namespace linnet;
using namespace linnet::testing;

namespace {

constexpr int64_t kBatch = 64, kMaxSeq = 32, kPage = 8, kPages = kMaxSeq / kPage;
constexpr int64_t kTargetLength = 9;
const int64_t kOthers[] = {0, 1, 3, 15, 63};

ModelConfig config() {
  ModelConfig c = tiny_config();
  c.hidden = 64;
  c.heads = 4;
  c.kv_heads = 2;
  c.inner = 96;
  return c;
}

// Each case runs on a backend and dtype: the rule is per backend (CUDA's cases skip without a GPU).
struct Case {
  const char* backend;
  DType t;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.backend << " " << dtype_name(c.t); }

struct Bench {
  ModelConfig c = config();
  std::unique_ptr<Backend> be;
  SingleCommunicator comm;
  std::unique_ptr<Model> m;
  explicit Bench(Case k) : be(make_backend(k.backend)) {
    c.dtype = k.t;
    RandomWeights w(21, k.t);
    m = std::make_unique<Model>(c, bind_generics(c, RunOptions{kBatch, kMaxSeq, 1, kPage, k.t}), w, *be, comm);
  }
  Model* operator->() { return m.get(); }
};

std::vector<int64_t> random_ids(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<int64_t>(g() % 97);
  return v;
}

// A call's sequences: the target among `others`, at index others / 2, each on its own cache
// row (shifted with the count, so the target's row changes too) and with its own pages.
struct Call {
  std::vector<std::vector<int64_t>> seqs;
  std::vector<int64_t> rows;
  int64_t target = 0;
  std::vector<int64_t> table;  // [kBatch, kPages]: a shuffled page per (row, page)

  explicit Call(int64_t others) {
    target = others / 2;
    for (int64_t i = 0; i <= others; ++i) {
      const bool is_target = i == target;
      const int64_t o = i < target ? i : i - 1;  // the other's own index: the same others in every call
      seqs.push_back(is_target ? random_ids(kTargetLength, 100) : random_ids(1 + (o * 5 + 3) % 17, 200 + static_cast<uint32_t>(o)));
      rows.push_back((i + 3 * others + 1) % kBatch);
    }
    table.resize(kBatch * kPages);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(static_cast<uint32_t>(others)));
  }
  int64_t slot(int64_t row, int64_t pos) const { return table[row * kPages + pos / kPage] * kPage + pos % kPage; }
  int64_t target_row() const { return rows[target]; }
  // A cache row no sequence of the call has (for a one-token prompt where a step's prefill
  // part would otherwise be empty: the entries want at least one token there).
  int64_t spare_row() const {
    for (int64_t r = 0; r < kBatch; ++r)
      if (std::find(rows.begin(), rows.end(), r) == rows.end()) return r;
    return -1;
  }
};

Tensor i32(const std::vector<int64_t>& v) { return Tensor::from_ints({static_cast<int64_t>(v.size())}, v); }

std::vector<uint8_t> bytes_of_row(const Tensor& t, int64_t r) {
  const Tensor row = t.rows(r, r + 1);
  const auto* p = static_cast<const uint8_t*>(row.data());
  return {p, p + row.nbytes()};
}

// Per call size, the target's results from `run`; all must equal the lone call's.
template <class Run>
void expect_invariant(Case t, const char* what, Run run) {
  std::vector<std::vector<uint8_t>> alone;
  for (int64_t others : kOthers) {
    Bench b(t);
    const Call call(others);
    const std::vector<std::vector<uint8_t>> got = run(b, call);
    if (others == 0) {
      alone = got;
      continue;
    }
    ASSERT_EQ(got.size(), alone.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(got[i] == alone[i]) << what << " (" << t.backend << ", " << dtype_name(t.t) << ") result " << i << " differs among " << others
                                      << " others";
  }
}

class BatchInvariance : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (std::string(GetParam().backend) == "cuda" && cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device is visible: " << cuda_status();
  }
};

TEST_P(BatchInvariance, PrefillSlotsAndDecodeRows) {
  expect_invariant(GetParam(), "prefill_slots / decode_rows", [](Bench& b, const Call& c) {
    const int64_t n = static_cast<int64_t>(c.seqs.size());
    int64_t longest = 0;
    for (const auto& s : c.seqs) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
    std::vector<int64_t> toks, lengths;
    for (const auto& s : c.seqs) {
      toks.insert(toks.end(), s.begin(), s.end());
      toks.insert(toks.end(), static_cast<size_t>(longest) - s.size(), 0);
      lengths.push_back(static_cast<int64_t>(s.size()));
    }
    const Tensor first = b->prefill_slots(Tensor::from_ints({n, longest}, toks), i32(c.rows), i32(lengths));
    std::vector<int64_t> next(kBatch, 0), pos(kBatch, -1);
    for (int64_t i = 0; i < n; ++i) {
      next[c.rows[i]] = 5 + i % 7;
      pos[c.rows[i]] = lengths[i];
    }
    next[c.target_row()] = 42;
    const Tensor step = b->decode_rows(Tensor::from_ints({kBatch, 1}, next), i32(pos));
    return std::vector<std::vector<uint8_t>>{bytes_of_row(first, c.target), bytes_of_row(step, c.target_row())};
  });
}

TEST_P(BatchInvariance, PrefillPackedAndStepPacked) {
  expect_invariant(GetParam(), "prefill_packed / step_packed", [](Bench& b, const Call& c) {
    std::vector<int64_t> toks, rows, pos, seg, last(kBatch, -1);
    for (size_t i = 0; i < c.seqs.size(); ++i) {
      for (size_t p = 0; p < c.seqs[i].size(); ++p) {
        toks.push_back(c.seqs[i][p]);
        rows.push_back(c.rows[i]);
        pos.push_back(static_cast<int64_t>(p));
        seg.push_back(static_cast<int64_t>(i));
      }
      last[c.rows[i]] = static_cast<int64_t>(toks.size()) - 1;
    }
    const Tensor first = b->prefill_packed(i32(toks), i32(rows), i32(pos), i32(seg), i32(last));
    // Then one pass: the target and the odd others take a step; the even others start again
    // with three fresh tokens packed beside it.
    std::vector<int64_t> t2, r2, p2, s2, l2(kBatch, -1), step_tok(kBatch, 0), step_pos(kBatch, -1);
    for (size_t i = 0; i < c.seqs.size(); ++i) {
      const int64_t row = c.rows[i];
      if (static_cast<int64_t>(i) == c.target || i % 2 == 1) {
        step_tok[row] = static_cast<int64_t>(i == static_cast<size_t>(c.target) ? 42 : 7);
        step_pos[row] = static_cast<int64_t>(c.seqs[i].size());
        continue;
      }
      for (int64_t p = 0; p < 3; ++p) {
        t2.push_back((row * 3 + p) % 97);
        r2.push_back(row);
        p2.push_back(p);
        s2.push_back(static_cast<int64_t>(i));
      }
      l2[row] = static_cast<int64_t>(t2.size()) - 1;
    }
    if (t2.empty()) {
      t2 = {3};
      r2 = {c.spare_row()};
      p2 = {0};
      s2 = {999};
    }
    const Tensor both = b->step_packed(i32(t2), i32(r2), i32(p2), i32(s2), i32(l2),
                                       Tensor::from_ints({kBatch, 1}, step_tok), i32(step_pos));
    return std::vector<std::vector<uint8_t>>{bytes_of_row(first, c.target_row()),
                                             bytes_of_row(both, kBatch + c.target_row())};
  });
}

TEST_P(BatchInvariance, PagedEntries) {
  expect_invariant(GetParam(), "prefill_paged / decode_paged / step_paged", [](Bench& b, const Call& c) {
    const Tensor table = Tensor::from_ints({kBatch, kPages}, c.table);
    std::vector<int64_t> toks, pos, rows, slots, last(kBatch, -1);
    for (size_t i = 0; i < c.seqs.size(); ++i) {
      for (size_t p = 0; p < c.seqs[i].size(); ++p) {
        toks.push_back(c.seqs[i][p]);
        pos.push_back(static_cast<int64_t>(p));
        rows.push_back(c.rows[i]);
        slots.push_back(c.slot(c.rows[i], static_cast<int64_t>(p)));
      }
      last[c.rows[i]] = static_cast<int64_t>(toks.size()) - 1;
    }
    const Tensor first = b->prefill_paged(i32(toks), i32(pos), i32(rows), i32(slots), i32(last), table);
    std::vector<int64_t> next(kBatch, 0), at(kBatch, -1);
    for (size_t i = 0; i < c.seqs.size(); ++i) {
      next[c.rows[i]] = static_cast<int64_t>(i) == c.target ? 42 : 9;
      at[c.rows[i]] = static_cast<int64_t>(c.seqs[i].size());
    }
    const Tensor second = b->decode_paged(Tensor::from_ints({kBatch, 1}, next), i32(at), table);
    // step_paged: every row's next step, and the others' prompts extended by two tokens
    // where they are even.
    std::vector<int64_t> t3, p3, r3, s3, l3(kBatch, -1), st(kBatch, 0), sp(kBatch, -1);
    for (size_t i = 0; i < c.seqs.size(); ++i) {
      const int64_t row = c.rows[i], len = static_cast<int64_t>(c.seqs[i].size()) + 1;
      if (static_cast<int64_t>(i) != c.target && i % 2 == 0) {
        for (int64_t p = len; p < len + 2; ++p) {
          t3.push_back((row + p) % 97);
          p3.push_back(p);
          r3.push_back(row);
          s3.push_back(c.slot(row, p));
        }
        l3[row] = static_cast<int64_t>(t3.size()) - 1;
      } else {
        st[row] = 11;
        sp[row] = len;
      }
    }
    if (t3.empty()) {
      const int64_t row = c.spare_row();
      t3 = {3};
      p3 = {0};
      r3 = {row};
      s3 = {c.slot(row, 0)};
    }
    const Tensor third = b->step_paged(i32(t3), i32(p3), i32(r3), i32(s3), i32(l3), Tensor::from_ints({kBatch, 1}, st),
                                       i32(sp), table);
    return std::vector<std::vector<uint8_t>>{bytes_of_row(first, c.target_row()), bytes_of_row(second, c.target_row()),
                                             bytes_of_row(third, kBatch + c.target_row())};
  });
}

TEST_P(BatchInvariance, LogProbsPacked) {
  expect_invariant(GetParam(), "log_probs_packed", [](Bench& b, const Call& c) {
    std::vector<int64_t> toks, pos, seg, tgt;
    int64_t begin = 0;
    for (size_t i = 0; i < c.seqs.size(); ++i) {
      if (static_cast<int64_t>(i) == c.target) begin = static_cast<int64_t>(toks.size());
      const auto& s = c.seqs[i];
      for (size_t p = 0; p < s.size(); ++p) {
        toks.push_back(s[p]);
        pos.push_back(static_cast<int64_t>(p));
        seg.push_back(static_cast<int64_t>(i));
        tgt.push_back(p + 1 < s.size() ? s[p + 1] : -100);
      }
    }
    const Tensor lp = b->log_probs_packed(i32(toks), i32(pos), i32(seg), Tensor::from_ints({static_cast<int64_t>(tgt.size())}, tgt, DType::i64));
    const Tensor mine = lp.rows(begin, begin + kTargetLength);
    const auto* p = static_cast<const uint8_t*>(mine.data());
    return std::vector<std::vector<uint8_t>>{{p, p + mine.nbytes()}};
  });
}

// The engines over it: a request's greedy and seeded tokens, and a window's log-likelihood,
// the same alone and among others, in any step or call size.
std::map<size_t, std::vector<int32_t>> generate_all(Model& m, const std::vector<engine::Request>& requests,
                                                    int64_t token_budget) {
  engine::Generator gen(m, engine::SchedulerLimits{0, kBatch, token_budget}, {});
  for (const auto& r : requests) EXPECT_EQ(gen.submit(r), "");
  std::map<size_t, std::vector<int32_t>> out;
  while (!gen.idle())
    for (auto& c : gen.step()) out[c.index] = c.tokens;
  return out;
}

TEST_P(BatchInvariance, GeneratorTokensAloneEqualAmongOthers) {
  std::vector<engine::Request> all;
  for (size_t i = 0; i < 40; ++i) {
    engine::Request r;
    r.index = i;
    for (int64_t t : random_ids(1 + static_cast<int64_t>(i * 7 % 19), 300 + static_cast<uint32_t>(i))) r.prompt.push_back(static_cast<int32_t>(t));
    r.params.max_new_tokens = 6 + static_cast<int64_t>(i % 5);
    if (i % 2) {  // half sampled, each with its own seed
      r.params.temperature = 1.3f;
      r.params.seed = 77 + i;
    }
    all.push_back(r);
  }
  Bench together(GetParam());
  const auto mixed = generate_all(*together.m, all, 48);
  for (size_t i : {size_t{0}, size_t{1}, size_t{20}, size_t{39}}) {
    Bench solo(GetParam());
    EXPECT_EQ(generate_all(*solo.m, {all[i]}, 512).at(i), mixed.at(i)) << "request " << i;
  }
}

TEST_P(BatchInvariance, EvaluatorLogLikelihoodsAloneEqualPacked) {
  std::vector<engine::Window> windows;
  for (size_t i = 0; i < 30; ++i) {
    engine::Window w;
    w.request = i;
    for (int64_t t : random_ids(1 + static_cast<int64_t>(i % 6), 400 + static_cast<uint32_t>(i))) w.context.push_back(static_cast<int32_t>(t));
    for (int64_t t : random_ids(1 + static_cast<int64_t>(i % 9), 500 + static_cast<uint32_t>(i))) w.scored.push_back(static_cast<int32_t>(t));
    w.greedy = true;
    windows.push_back(w);
  }
  Bench b(GetParam());
  std::vector<engine::WindowScore> packed, small;
  engine::Evaluator(*b.m, 512).score(windows, packed);
  engine::Evaluator(*b.m, 16).score(windows, small);
  for (size_t i = 0; i < windows.size(); ++i) {
    std::vector<engine::WindowScore> one;
    engine::Evaluator(*b.m, 512).score({windows[i]}, one);
    EXPECT_EQ(one[0].loglikelihood, packed[i].loglikelihood) << "window " << i << " alone vs packed in one call";
    EXPECT_EQ(small[i].loglikelihood, packed[i].loglikelihood) << "window " << i << " in calls of 16 tokens";
    EXPECT_EQ(one[0].greedy, packed[i].greedy) << "window " << i;
  }
}

// Nor on how many threads run it (the CPU splits a product by panels, attention by heads).
TEST(BatchInvarianceCpu, ThreadCountDoesNotChangeBits) {
  const Call call(15);
  std::vector<int64_t> toks, rows, pos, seg, tgt;
  for (size_t i = 0; i < call.seqs.size(); ++i)
    for (size_t p = 0; p < call.seqs[i].size(); ++p) {
      toks.push_back(call.seqs[i][p]);
      pos.push_back(static_cast<int64_t>(p));
      seg.push_back(static_cast<int64_t>(i));
      tgt.push_back(p + 1 < call.seqs[i].size() ? call.seqs[i][p + 1] : -100);
    }
  const int threads = omp_get_max_threads();
  std::vector<std::vector<uint8_t>> got;
  for (int n : {1, 2, 3}) {
    omp_set_num_threads(n);
    Bench b(Case{"cpu", DType::f32});
    const Tensor lp = b->log_probs_packed(i32(toks), i32(pos), i32(seg), Tensor::from_ints({static_cast<int64_t>(tgt.size())}, tgt, DType::i64));
    const auto* p = static_cast<const uint8_t*>(lp.data());
    got.emplace_back(p, p + lp.nbytes());
  }
  omp_set_num_threads(threads);
  EXPECT_TRUE(got[0] == got[1]) << "1 thread vs 2";
  EXPECT_TRUE(got[0] == got[2]) << "1 thread vs 3";
}

INSTANTIATE_TEST_SUITE_P(Backends, BatchInvariance,
                         ::testing::Values(Case{"cpu", DType::f32}, Case{"cpu", DType::bf16}, Case{"cuda", DType::f32},
                                           Case{"cuda", DType::bf16}),
                         [](const auto& info) { return std::string(info.param.backend) + "_" + dtype_name(info.param.t); });

}  // namespace
