// The invariants that tie the entries together (issue: the model and all 17 entries).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "model_fixtures.h"

using namespace linnet;
using namespace linnet::testing;

namespace {

constexpr double kTol = 2e-5;  // same backend and dtype, different summation orders

std::vector<int64_t> random_ids(size_t n, uint32_t seed, int64_t vocab = 97) {
  std::mt19937 g(seed);
  std::vector<int64_t> v(n);
  for (auto& x : v) x = static_cast<int64_t>(g() % vocab);
  return v;
}

Tensor row(const Tensor& t, int64_t r) { return t.rows(r, r + 1).reshape({t.dim(1)}); }
Tensor i32(std::vector<int64_t> v) { return Tensor::from_ints({static_cast<int64_t>(v.size())}, v); }
Tensor column(const std::vector<int64_t>& v) { return Tensor::from_ints({static_cast<int64_t>(v.size()), 1}, v); }

void expect_close(const Tensor& a, const Tensor& b, const std::string& what, double tol = kTol) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_LT(rel_diff(a, b), tol) << what;
}

bool caches_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(a[i].data(), b[i].data(), a[i].nbytes()) != 0) return false;
  return true;
}

}  // namespace

TEST(Entries, NextTokenIsForwardsLastRow) {
  TinyModel m;
  Tensor t = ids({3, 6}, random_ids(18, 1));
  Tensor f = m->forward(t), n = m->next_token(t);
  for (int64_t b = 0; b < 3; ++b) expect_close(row(n, b), f.rows(b, b + 1).reshape({6, 97}).rows(5, 6).reshape({97}), "row");
}

TEST(Entries, PrefillThenDecodeStepsEqualForward) {
  TinyModel m;  // Batch 4
  auto toks = random_ids(4 * 9, 2);
  Tensor f = m->forward(ids({4, 9}, toks));
  std::vector<int64_t> head;
  for (int b = 0; b < 4; ++b) head.insert(head.end(), toks.begin() + b * 9, toks.begin() + b * 9 + 5);
  Tensor p = m->prefill(ids({4, 5}, head), 0);
  for (int b = 0; b < 4; ++b) expect_close(row(p, b), f.rows(b, b + 1).reshape({9, 97}).rows(4, 5).reshape({97}), "prefill");
  for (int s = 5; s < 9; ++s) {
    std::vector<int64_t> col;
    for (int b = 0; b < 4; ++b) col.push_back(toks[b * 9 + s]);
    Tensor d = m->decode(column(col), s);
    for (int b = 0; b < 4; ++b)
      expect_close(row(d, b), f.rows(b, b + 1).reshape({9, 97}).rows(s, s + 1).reshape({97}), "decode " + std::to_string(s));
  }
}

TEST(Entries, PrefillInChunksEqualsPrefillAtOnce) {
  TinyModel a, b;
  auto toks = random_ids(4 * 12, 3);
  Tensor whole = a->prefill(ids({4, 12}, toks), 0);
  Tensor last;
  for (int c0 = 0; c0 < 12; c0 += 5) {
    const int c1 = std::min(12, c0 + 5);
    std::vector<int64_t> chunk;
    for (int r = 0; r < 4; ++r) chunk.insert(chunk.end(), toks.begin() + r * 12 + c0, toks.begin() + r * 12 + c1);
    last = b->prefill(ids({4, c1 - c0}, chunk), c0);
  }
  expect_close(last, whole, "chunked");
  for (size_t i = 0; i < 4; ++i) EXPECT_LT(rel_diff(a->cache_snapshot()[i], b->cache_snapshot()[i]), kTol);
}

TEST(Entries, DecodeRowsWithEqualPositionsIsDecode) {
  TinyModel a, b;
  auto toks = random_ids(4 * 6, 4);
  a->prefill(ids({4, 6}, toks), 0);
  b->prefill(ids({4, 6}, toks), 0);
  Tensor next = column(random_ids(4, 5));
  expect_close(b->decode_rows(next, i32({6, 6, 6, 6})), a->decode(next, 6), "decode_rows");
}

TEST(Entries, PrefillSlotsEqualsPerSequencePrefill) {
  TinyModel m, ref;
  // Sequences of lengths 5, 3 into cache rows 2 and 0; padding past each length is ignored.
  auto s0 = random_ids(5, 6), s1 = random_ids(3, 7);
  std::vector<int64_t> toks = s0;
  toks.insert(toks.end(), s1.begin(), s1.end());
  toks.insert(toks.end(), {-1, 12345});  // padding: never read
  Tensor out = m->prefill_slots(ids({2, 5}, toks), i32({2, 0}), i32({5, 3}));
  Tensor f0 = ref->next_token(ids({1, 5}, s0)), f1 = ref->next_token(ids({1, 3}, s1));
  expect_close(row(out, 0), row(f0, 0), "sequence 0");
  expect_close(row(out, 1), row(f1, 0), "sequence 1");
  // The cache rows now hold the sequences: decoding after them equals forward.
  auto s0n = s0;
  s0n.push_back(11);
  Tensor d = m->decode_rows(column({0, 0, 11, 0}), i32({-1, -1, 5, -1}));
  expect_close(row(d, 2), row(ref->next_token(ids({1, 6}, s0n)), 0), "decode after prefill_slots");
}

// A paged twin equals its contiguous entry, with the identity table and with a shuffled one.
TEST(Entries, PagedEntriesEqualTheirContiguousTwins) {
  const int64_t pages = 4;  // MaxSeq 32 / PageSize 8
  std::vector<int64_t> identity(16), shuffled(16);
  std::iota(identity.begin(), identity.end(), 0);
  shuffled = identity;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(9));
  auto toks = random_ids(4 * 11, 10);
  for (const auto* table : {&identity, &shuffled}) {
    TinyModel contiguous, paged;
    Tensor tab = Tensor::from_ints({4, pages}, *table);
    // prefill_paged of four sequences of 11 tokens = prefill.
    std::vector<int64_t> pos, rows, slots, flat;
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t s = 0; s < 11; ++s) {
        flat.push_back(toks[r * 11 + s]);
        pos.push_back(s);
        rows.push_back(r);
        slots.push_back((*table)[r * pages + s / 8] * 8 + s % 8);
      }
    Tensor want = contiguous->prefill(ids({4, 11}, toks), 0);
    Tensor got = paged->prefill_paged(i32(flat), i32(pos), i32(rows), i32(slots), i32({10, 21, 32, 43}), tab);
    expect_close(got, want, table == &identity ? "prefill_paged identity" : "prefill_paged shuffled");
    // decode_paged = decode_rows, with an idle row.
    Tensor next = column(random_ids(4, 11));
    want = contiguous->decode_rows(next, i32({11, -1, 11, 11}));
    got = paged->decode_paged(next, i32({11, -1, 11, 11}), tab);
    expect_close(got, want, "decode_paged");
    // step_paged = step_packed when each row's prompt starts a fresh sequence.
    TinyModel c2, p2;
    auto prompt = random_ids(6, 12);
    Tensor sp = c2->step_packed(i32(prompt), i32({1, 1, 1, 3, 3, 3}), i32({0, 1, 2, 0, 1, 2}), i32({0, 0, 0, 1, 1, 1}),
                                i32({-1, 2, -1, 5}), column({0, 0, 0, 0}), i32({-1, -1, -1, -1}));
    std::vector<int64_t> sslots;
    for (int i = 0; i < 6; ++i) sslots.push_back((*table)[(i < 3 ? 1 : 3) * pages] * 8 + i % 3);
    Tensor pp = p2->step_paged(i32(prompt), i32({0, 1, 2, 0, 1, 2}), i32({1, 1, 1, 3, 3, 3}), i32(sslots),
                               i32({-1, 2, -1, 5}), column({0, 0, 0, 0}), i32({-1, -1, -1, -1}), tab);
    expect_close(pp, sp, "step_paged");
  }
}

TEST(Entries, PackedEntriesEqualSequencesRunOneByOne) {
  TinyModel m, ref;
  auto a = random_ids(5, 13), b = random_ids(4, 14);
  std::vector<int64_t> toks = a;
  toks.insert(toks.end(), b.begin(), b.end());
  Tensor t = i32(toks), pos = i32({0, 1, 2, 3, 4, 0, 1, 2, 3}), seg = i32({7, 7, 7, 7, 7, 2, 2, 2, 2});
  // prefill_packed into rows 3 and 1 = the sequences' next_token.
  Tensor out = m->prefill_packed(t, i32({3, 3, 3, 3, 3, 1, 1, 1, 1}), pos, seg, i32({-1, 8, -1, 4}));
  expect_close(row(out, 3), row(ref->next_token(ids({1, 5}, a)), 0), "packed sequence a");
  expect_close(row(out, 1), row(ref->next_token(ids({1, 4}, b)), 0), "packed sequence b");
  // hidden_packed and log_probs_packed: the same per sequence.
  Tensor h = m->hidden_packed(t, pos, seg);
  Tensor ha = m->hidden_packed(i32(a), i32({0, 1, 2, 3, 4}), i32({0, 0, 0, 0, 0}));
  expect_close(h.rows(0, 5), ha, "hidden_packed");
  std::vector<int64_t> tg = {a[1], a[2], a[3], a[4], -100, b[1], b[2], b[3], -1};
  Tensor lp = m->log_probs_packed(t, pos, seg, Tensor::from_ints({9}, tg, DType::i64));
  Tensor fb = ref->forward(ids({1, 4}, b)).reshape({4, 97});
  for (int i = 0; i < 3; ++i) {
    auto l = row(fb, i).to_floats();
    double mx = *std::max_element(l.begin(), l.end()), se = 0;
    for (float x : l) se += std::exp(x - mx);
    EXPECT_NEAR(lp.to_floats()[5 + i], l[b[i + 1]] - mx - std::log(se), 1e-4) << i;
  }
  EXPECT_EQ(lp.to_floats()[4], 0.0f);
  EXPECT_EQ(lp.to_floats()[8], 0.0f);
}

TEST(Entries, StepEntriesEqualTheirHalvesRunApart) {
  TinyModel one, two;
  auto warm = random_ids(4 * 3, 15);
  one->prefill(ids({4, 3}, warm), 0);
  two->prefill(ids({4, 3}, warm), 0);
  // A new prompt into row 2 while rows 0 and 3 step at position 3 (row 1 idle).
  auto prompt = random_ids(4, 16);
  Tensor t = i32(prompt), rows = i32({2, 2, 2, 2}), pos = i32({0, 1, 2, 3}), seg = i32({0, 0, 0, 0});
  Tensor step_t = column({5, 6, 0, 8}), step_p = i32({3, -1, -1, 3});
  Tensor both = one->step_packed(t, rows, pos, seg, i32({-1, -1, 3, -1}), step_t, step_p);
  Tensor first = two->prefill_packed(t, rows, pos, seg, i32({-1, -1, 3, -1}));
  Tensor second = two->decode_rows(step_t, step_p);
  expect_close(both.rows(0, 4), first, "prefill half");
  expect_close(both.rows(4, 8), second, "decode half");
}

TEST(Entries, GenerateIsDecodeAndArgmaxLoop) {
  TinyModel g, d;
  auto warm = random_ids(4 * 4, 17);
  g->prefill(ids({4, 4}, warm), 0);
  Tensor p = d->prefill(ids({4, 4}, warm), 0);
  Tensor start = column(random_ids(4, 18));
  Tensor out = g->generate(start, 4, 6);
  ASSERT_EQ(out.shape(), (Shape{4, 6}));
  std::vector<int64_t> cur = start.to_ints();
  for (int i = 0; i < 6; ++i) {
    Tensor l = d->decode(column(cur), 4 + i);
    for (int b = 0; b < 4; ++b) {
      auto v = row(l, b).to_floats();
      cur[b] = std::max_element(v.begin(), v.end()) - v.begin();  // first maximum = lowest index
      EXPECT_EQ(out.to_ints()[b * 6 + i], cur[b]) << "row " << b << " step " << i;
    }
  }
}

TEST(Entries, GenerateUntilStopsAndPadsRight) {
  TinyModel m, ref;
  Tensor start = column(random_ids(4, 19));
  Tensor greedy = ref->generate(start, 0, 8);
  // Use row 0's third token as eos: row 0 stops there; the rest run until all stop or MaxNew.
  const int32_t eos = static_cast<int32_t>(greedy.to_ints()[2]);
  auto [toks, n] = m->generate_until(start, 0, eos, 8);
  auto g = greedy.to_ints(), t = toks.to_ints();
  for (int b = 0; b < 4; ++b) {
    bool seen = false;
    for (int i = 0; i < 8; ++i) {
      if (seen || i >= n) EXPECT_EQ(t[b * 8 + i], eos) << b << "," << i;
      else EXPECT_EQ(t[b * 8 + i], g[b * 8 + i]) << b << "," << i;
      seen |= !seen && i < n && g[b * 8 + i] == eos;
    }
  }
  EXPECT_GE(n, 3);
  // When every row hits eos at once the loop stops early: eos = each row's first token.
  TinyModel one(tiny_config(), RunOptions{1, 32, 1, 8, std::nullopt});
  Tensor s1 = column({start.to_ints()[0]});
  const int32_t first = static_cast<int32_t>(one->generate(s1, 0, 1).to_ints()[0]);
  TinyModel two(tiny_config(), RunOptions{1, 32, 1, 8, std::nullopt});
  auto [t2, n2] = two->generate_until(s1, 0, first, 8);
  EXPECT_EQ(n2, 1);
  EXPECT_EQ(t2.to_ints(), std::vector<int64_t>(8, first));
}

TEST(Entries, SampleIsReproducibleAndFollowsSoftmax) {
  TinyModel m;
  Tensor start = column({3, 3, 3, 3});
  auto key = [](int64_t a, int64_t b) { return Tensor::from_ints({2}, {a, b}, DType::i64); };
  Tensor s1 = m->sample(start, 0, key(1, 2), 0.8f, 5), s2 = m->sample(start, 0, key(1, 2), 0.8f, 5);
  EXPECT_EQ(s1.to_ints(), s2.to_ints());
  EXPECT_NE(s1.to_ints(), m->sample(start, 0, key(1, 3), 0.8f, 5).to_ints());
  EXPECT_EQ(m->sample(start, 0, key(1, 2), 0.0f, 5).to_ints(), m->generate(start, 0, 5).to_ints());
  // Chi-square: over many keys, first tokens follow softmax(logits / T).
  const float temp = 0.8f;
  auto logits = row(m->decode(start, 0), 0).to_floats();
  std::vector<double> p(logits.size());
  double mx = *std::max_element(logits.begin(), logits.end()), z = 0;
  for (size_t k = 0; k < p.size(); ++k) z += (p[k] = std::exp((logits[k] - mx) / temp));
  std::vector<double> count(p.size(), 0.0);
  const int keys = 1500;
  for (int k = 0; k < keys; ++k)
    for (auto t : m->sample(start, 0, key(1000 + k, 77 * k), temp, 1).to_ints()) count[t] += 1;
  const double n = keys * 4.0;
  // Merge improbable tokens into one bin so each expected count is at least 5.
  double chi2 = 0, rest_e = 0, rest_o = 0;
  int bins = 0;
  for (size_t k = 0; k < p.size(); ++k) {
    const double e = n * p[k] / z;
    if (e < 5) {
      rest_e += e;
      rest_o += count[k];
      continue;
    }
    chi2 += (count[k] - e) * (count[k] - e) / e;
    ++bins;
  }
  if (rest_e > 0) chi2 += (rest_o - rest_e) * (rest_o - rest_e) / rest_e, ++bins;
  const double df = bins - 1;
  EXPECT_LT(chi2, df + 5 * std::sqrt(2 * df)) << "chi2 " << chi2 << " over " << df << " degrees of freedom";
  EXPECT_GT(df, 5);
}

TEST(Entries, LossIsWeightedMeanOfNegativeLogProbs) {
  TinyModel m;
  auto toks = random_ids(10, 20);
  Tensor t = i32(toks), pos = i32({0, 1, 2, 3, 4, 5, 0, 1, 2, 3}), seg = i32({0, 0, 0, 0, 0, 0, 1, 1, 1, 1});
  std::vector<int64_t> tg = {5, 9, 1, 0, 96, -1, 3, 3, 50, 40000};
  std::vector<float> w = {1, 0.5f, 2, 0, 1, 0, 1, 1, 1, 0};
  Tensor lp = m->log_probs_packed(t, pos, seg, Tensor::from_ints({10}, {5, 9, 1, 0, 96, -1, 3, 3, 50, -1}, DType::i64));
  const float loss = m->loss_packed(t, pos, seg, Tensor::from_ints({10}, tg, DType::i64), Tensor::from_floats({10}, w));
  double num = 0, den = 0;
  for (int i = 0; i < 10; ++i)
    if (w[i] != 0) num += -w[i] * lp.to_floats()[i], den += w[i];
  EXPECT_NEAR(loss, num / den, 1e-5);
  EXPECT_EQ(m->loss_packed(t, pos, seg, Tensor::from_ints({10}, tg, DType::i64),
                           Tensor::from_floats({10}, std::vector<float>(10, 0.0f))),
            0.0f);
}

TEST(Entries, IdleRowsGiveZeroRowsAndLeaveTheCache) {
  TinyModel m;
  m->prefill(ids({4, 3}, random_ids(12, 21)), 0);
  auto before = m->cache_snapshot();
  Tensor out = m->decode_rows(column({1, 2, 3, 4}), i32({-1, -1, -1, -1}));
  for (float v : out.to_floats()) ASSERT_EQ(v, 0.0f);
  EXPECT_TRUE(caches_equal(before, m->cache_snapshot()));
  out = m->decode_rows(column({1, 2, 3, 4}), i32({3, -1, 3, -1}));
  for (float v : row(out, 1).to_floats()) ASSERT_EQ(v, 0.0f);
  auto after = m->cache_snapshot();
  // Row 1 (idle) is untouched: cache row 1 of every layer equals the snapshot's.
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_EQ(std::memcmp(after[i].rows(1, 2).data(), before[i].rows(1, 2).data(), after[i].rows(1, 2).nbytes()), 0);
}
