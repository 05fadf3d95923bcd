// The batch engine (engine/): pages, scheduling, and the rule that a request's tokens do not depend
// on its neighbours (docs/entries.md "The batch engine") — checked against the card's own entries
// run on each request alone.
#include <gtest/gtest.h>

#include <set>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "engine/evaluator.h"
#include "engine/generator.h"
#include "model_fixtures.h"

using namespace linnet;
using namespace linnet::engine;
using linnet::testing::TinyModel;

namespace {

// A tiny GQA model (vocab 97) with a paged pool of Batch × MaxSeq 64 / PageSize 8.
struct Tiny : TinyModel {
  explicit Tiny(int64_t batch = 8, uint64_t seed = 7)
      : TinyModel(linnet::testing::tiny_config(), RunOptions{batch, 64, 1, 8, std::nullopt}, seed) {}
};

std::vector<int32_t> prompt(uint32_t seed, size_t n) {
  std::mt19937 g(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(g() % 97);
  return v;
}

// Runs the requests to completion, tokens by request index.
std::map<size_t, std::vector<int32_t>> run_all(Generator& gen, const std::vector<Request>& requests,
                                               const StopCheck& stop = {}) {
  for (const auto& r : requests) EXPECT_EQ(gen.submit(r), "");
  std::map<size_t, std::vector<int32_t>> out;
  while (!gen.idle())
    for (auto& c : gen.step(stop)) out[c.index] = c.tokens;
  return out;
}

// The card's way, alone at Batch 1: prefill the prompt but its last token, then generate
// (greedy) or sample with key [seed, 0].
std::vector<int32_t> alone(const std::vector<int32_t>& p, int64_t max_new, float temperature = 0, uint64_t seed = 0) {
  TinyModel m(linnet::testing::tiny_config(), RunOptions{1, 64, 1, 8, std::nullopt});
  const int64_t n = static_cast<int64_t>(p.size());
  if (n > 1) m->prefill(Tensor::from_ints({1, n - 1}, std::vector<int64_t>(p.begin(), p.end() - 1)), 0);
  const Tensor last = Tensor::from_ints({1, 1}, {p.back()});
  const Tensor t = temperature == 0
                       ? m->generate(last, static_cast<int32_t>(n - 1), max_new)
                       : m->sample(last, static_cast<int32_t>(n - 1),
                                   Tensor::from_ints({2}, {static_cast<int64_t>(seed), 0}, DType::i64), temperature,
                                   max_new);
  const auto v = t.to_ints();
  return {v.begin(), v.end()};
}

Request request(size_t index, std::vector<int32_t> p, int64_t max_new, float temperature = 0, uint64_t seed = 0) {
  Request r;
  r.index = index;
  r.prompt = std::move(p);
  r.params.max_new_tokens = max_new;
  r.params.temperature = temperature;
  r.params.seed = seed;
  return r;
}

}  // namespace

TEST(PageAllocator, FreeListAndReferenceCounts) {
  PageAllocator pool(3, 4);
  const int32_t a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  EXPECT_EQ(pool.allocate(), -1);
  EXPECT_EQ(pool.free_pages(), 0);
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  pool.publish(a, toks, 0, -1);
  pool.publish(b, toks, 1, a);
  // The same first 8 tokens share both pages; a different 5th token only the first.
  EXPECT_EQ(pool.share(toks, 0, -1), a);
  EXPECT_EQ(pool.share(toks, 1, a), b);
  std::vector<int32_t> other = toks;
  other[4] = 99;
  EXPECT_EQ(pool.share(other, 0, -1), a);
  EXPECT_EQ(pool.share(other, 1, a), -1);
  EXPECT_EQ(pool.share(toks, 1, c), -1);  // the same tokens after another page are another prefix
  EXPECT_EQ(pool.refs(a), 3);
  for (int i = 0; i < 3; ++i) pool.release(a);
  EXPECT_EQ(pool.free_pages(), 1);
  EXPECT_EQ(pool.share(toks, 0, -1), -1);  // freed pages are forgotten
  pool.release(b);
  pool.release(b);
  pool.release(c);
  EXPECT_EQ(pool.free_pages(), 3);
  EXPECT_THROW(pool.release(c), Error);
}

TEST(Scheduler, RejectsWhatCanNeverFitAndBoundsEveryStep) {
  PageAllocator pool(6, 8);
  Scheduler s(pool, SchedulerLimits{64, 4, 16});
  EXPECT_NE(s.submit(request(0, prompt(1, 60), 8)).find("exceeds MaxSeq = 64"), std::string::npos);
  EXPECT_NE(s.submit(request(0, prompt(1, 40), 20)).find("the KV pool has 6"), std::string::npos);
  EXPECT_NE(s.submit(request(0, {}, 8)).find("no tokens"), std::string::npos);
  // A long prompt never stalls decoding rows: every step stays within 16 tokens, and rows
  // that decode get their token in every step while the long one prefills in chunks.
  EXPECT_EQ(s.submit(request(0, prompt(2, 3), 10)), "");
  EXPECT_EQ(s.submit(request(1, prompt(3, 30), 4)), "");
  int chunks = 0, step = 0;
  while (!s.idle()) {
    ++step;
    auto rows = s.schedule();
    int64_t tokens = 0;
    bool decoding = false, prefilling = false;
    for (const auto& r : rows) {
      tokens += r.count;
      decoding |= r.seq->request.index == 0 && r.count == 1;
      prefilling |= r.seq->request.index == 1 && r.count > 1;
    }
    EXPECT_LE(tokens, 16);
    if (prefilling) ++chunks;
    if (prefilling && step > 1) {
      EXPECT_TRUE(decoding) << "step " << step << ": a prefill chunk without the decoding row";
    }
    s.complete(rows, std::vector<int32_t>(rows.size(), 5), {}, {});
  }
  EXPECT_GE(chunks, 2);  // 30 prompt tokens in chunks of at most 16
  EXPECT_EQ(pool.free_pages(), 6);
}

// whole_prompts (models whose RoPE follows the sequence's length): a prompt is never split
// into chunks nor shares another's pages; past the budget it runs as a step's only row.
TEST(Scheduler, WholePromptsAreNeverChunkedNorShared) {
  PageAllocator pool(16, 8);
  SchedulerLimits limits{64, 4, 16};
  limits.whole_prompts = true;
  Scheduler s(pool, limits);
  const auto shared = prompt(4, 20);
  EXPECT_EQ(s.submit(request(0, shared, 3)), "");
  EXPECT_EQ(s.submit(request(1, shared, 3)), "");  // the same 20 tokens: two full pages in common
  EXPECT_EQ(s.submit(request(2, prompt(5, 6), 3)), "");
  while (!s.idle()) {
    auto rows = s.schedule();
    ASSERT_FALSE(rows.empty());
    for (const auto& r : rows) {
      if (r.count > 1) {
        EXPECT_EQ(r.begin, 0) << "request " << r.seq->request.index << " chunked";
        EXPECT_EQ(r.count, static_cast<int64_t>(r.seq->tokens.size()));
        if (r.count > 16) {
          EXPECT_EQ(rows.size(), 1u) << "a prompt past the budget runs alone";
        }
      }
      for (int32_t p : r.seq->pages) EXPECT_EQ(pool.refs(p), 1) << "a page shared";
    }
    s.complete(rows, std::vector<int32_t>(rows.size(), 5), {}, {});
  }
  EXPECT_EQ(pool.free_pages(), 16);
}

// A recurrent state's aligned chunk (state_chunk; kDeltaRuleChunk in the engine): every prompt
// piece starts and ends at a multiple of it or at the prompt's end — a piece that what is left of
// the step's budget cannot take to the next multiple goes past the budget, by less than a chunk,
// rather than wait behind the decoding rows — and snapshots are kept only at multiples of it and
// PageSize. (Chunk 16 over pages of 8; budget 18, three rows decoding; five state slots.)
TEST(Scheduler, RecurrentPromptsAreCutWhereTheStateChunksEnd) {
  PageAllocator pool(64, 8);
  SchedulerLimits limits{256, 5, 18};
  limits.state_slots = 5;
  limits.state_snapshots = 5;
  limits.state_chunk = 16;
  Scheduler s(pool, limits);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(s.submit(request(i, prompt(static_cast<int>(10 + i), 2), 12)), "");
  const auto shared = prompt(4, 52);
  EXPECT_EQ(s.submit(request(3, shared, 3)), "");
  EXPECT_EQ(s.submit(request(4, shared, 3)), "");  // shares the pages up to the snapshot at 48
  int64_t prompt_tokens = 0, most = 0, beside_decoding = 0;
  std::set<int64_t> keeps;
  while (!s.idle()) {
    auto rows = s.schedule();
    ASSERT_FALSE(rows.empty());
    int64_t tokens = 0, decoding = 0;
    for (const auto& r : rows) {
      const int64_t end = r.begin + r.count, n = static_cast<int64_t>(r.seq->tokens.size());
      tokens += r.count;
      if (r.count == 1 && r.sample && r.begin + 1 == n) ++decoding;
      if (r.count > 1 || !r.sample) {
        EXPECT_EQ(r.begin % 16, 0) << "request " << r.seq->request.index << " piece at " << r.begin;
        EXPECT_TRUE(end % 16 == 0 || end == n) << "request " << r.seq->request.index << " piece to " << end;
        prompt_tokens += r.count;
        if (r.seq->request.index == 3 && decoding == 3) ++beside_decoding;
      }
      for (const auto& k : r.keeps) {
        EXPECT_EQ(k.at % 16, 0) << "a snapshot at " << k.at;
        keeps.insert(k.at);
      }
    }
    most = std::max(most, tokens);
    s.complete(rows, std::vector<int32_t>(rows.size(), 5), {}, {});
  }
  EXPECT_GT(beside_decoding, 0) << "the long prompt ran beside the three decoding rows";
  EXPECT_LE(most, 18 + 15);
  EXPECT_EQ(keeps, std::set<int64_t>{48});
  EXPECT_EQ(prompt_tokens, 3 * 2 + 52 + 4);  // request 4 restored 48 tokens' state and computed 4
  EXPECT_EQ(pool.free_pages(), 64);
}

// docs/entries.md "The batch engine": greedy picks as `generate` does, whatever else is running.
TEST(Generator, GreedyAloneEqualsAmongSixtyFourOthers) {
  std::vector<Request> all;
  for (size_t i = 0; i < 65; ++i) all.push_back(request(i, prompt(100 + i, 1 + (i * 7) % 23), 4 + i % 9));
  Tiny model(8);
  Generator gen(*model.model, SchedulerLimits{0, 256, 64}, {});
  const auto together = run_all(gen, all);
  for (size_t i : {size_t{0}, size_t{7}, size_t{33}, size_t{64}}) {
    EXPECT_EQ(together.at(i), alone(all[i].prompt, all[i].params.max_new_tokens)) << "request " << i;
    Tiny solo(1);
    Generator g1(*solo.model, SchedulerLimits{0, 256, 64}, {});
    EXPECT_EQ(run_all(g1, {all[i]}).at(i), together.at(i)) << "request " << i << " alone in the engine";
  }
  EXPECT_EQ(together.size(), all.size());
}

// Sampling with seed s equals the `sample` entry on the request alone with key [s, 0].
TEST(Generator, SampledTokensDependOnlyOnPromptAndSeed) {
  std::vector<Request> all;
  for (size_t i = 0; i < 20; ++i) all.push_back(request(i, prompt(200 + i, 2 + i % 11), 8, 0.9f, 1000 + i));
  all.push_back(request(20, all[3].prompt, 8, 0.9f, 1003));  // the same prompt and seed twice
  Tiny model(4);
  Generator gen(*model.model, SchedulerLimits{0, 64, 32}, {});
  const auto together = run_all(gen, all);
  for (size_t i : {size_t{0}, size_t{3}, size_t{19}})
    EXPECT_EQ(together.at(i), alone(all[i].prompt, 8, 0.9f, 1000 + i)) << "request " << i;
  EXPECT_EQ(together.at(20), together.at(3));
}

// top-k 1 and a tiny top-p are greedy; top-k = Vocab is plain sampling.
TEST(Generator, TopKAndTopPKeepTheirSets) {
  const auto p = prompt(300, 9);
  std::vector<Request> rs = {request(0, p, 10, 0.8f, 5), request(1, p, 10, 0.8f, 5), request(2, p, 10, 0.8f, 5),
                             request(3, p, 10, 0.8f, 5)};
  rs[0].params.top_k = 1;
  rs[1].params.top_p = 1e-6f;
  rs[2].params.top_k = 97;
  rs[3].params.top_k = 5;
  rs[3].params.top_p = 0.5f;
  Tiny model(4);
  Generator gen(*model.model, SchedulerLimits{0, 64, 8}, {});
  const auto out = run_all(gen, rs);
  EXPECT_EQ(out.at(0), alone(p, 10));
  EXPECT_EQ(out.at(1), alone(p, 10));
  EXPECT_EQ(out.at(2), alone(p, 10, 0.8f, 5));
  // top-k 5 / top-p 0.5: every token is among the 5 most likely of its step (checked on
  // the logits the model gives for the sequence so far).
  TinyModel check(linnet::testing::tiny_config(), RunOptions{1, 64, 1, 8, std::nullopt});
  std::vector<int64_t> seq(p.begin(), p.end());
  for (int32_t t : out.at(3)) {
    const auto logits = check->next_token(Tensor::from_ints({1, static_cast<int64_t>(seq.size())}, seq)).to_floats();
    int better = 0;
    for (float l : logits) better += l > logits[static_cast<size_t>(t)];
    EXPECT_LT(better, 5);
    seq.push_back(t);
  }
}

// Full pages of a common prompt are held once; a pool too small for all requests at once
// preempts and recomputes. Neither changes a token.
TEST(Generator, PrefixSharingAndPreemptionChangeNoOutput) {
  const auto system = prompt(400, 24);  // three full pages of 8
  std::vector<Request> rs;
  for (size_t i = 0; i < 6; ++i) {
    std::vector<int32_t> p = system;
    const auto tail = prompt(410 + i, 3 + i);
    p.insert(p.end(), tail.begin(), tail.end());
    rs.push_back(request(i, p, 6 + i));
  }
  Tiny roomy(8);
  Generator a(*roomy.model, SchedulerLimits{0, 64, 8}, {});  // budget 8: the first prompt's pages
  const auto shared = run_all(a, rs);                         // are published before the others start
  for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(shared.at(i), alone(rs[i].prompt, rs[i].params.max_new_tokens));
  EXPECT_LT(a.stats().peak_pages, 6 * 5) << "the 3 common pages were not shared";
  EXPECT_LE(a.stats().prefill_tokens, 24 + 6 * 8 + 10);
  Tiny tight(1);  // 8 pages of 8: not enough for six 5-page requests at once
  Generator b(*tight.model, SchedulerLimits{0, 64, 64}, {});
  const auto preempted = run_all(b, rs);
  EXPECT_GT(b.stats().preemptions, 0);
  for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(preempted.at(i), shared.at(i)) << "request " << i;
}

TEST(Generator, StopsAtAnyEndOfSequenceIdAndAtStopChecks) {
  const auto p = prompt(500, 5);
  const auto free_run = alone(p, 12);
  Tiny model(2);
  // Two eos ids: the 4th and the 9th token of the free run; it stops at the first seen.
  Generator gen(*model.model, SchedulerLimits{0, 64, 8}, {free_run[8], free_run[3]});
  auto out = run_all(gen, {request(0, p, 12)});
  EXPECT_EQ(out.at(0), std::vector<int32_t>(free_run.begin(), free_run.begin() + 4));
  Request ignoring = request(1, p, 12);
  ignoring.params.ignore_eos = true;
  EXPECT_EQ(run_all(gen, {ignoring}).at(1), free_run);
  // A stop check that fires after 6 tokens.
  out = run_all(gen, {ignoring}, [](size_t, const std::vector<int32_t>& t) { return t.size() == 6; });
  EXPECT_EQ(out.at(1).size(), 6u);
}

// ---- eval ----

TEST(Evaluator, WindowsEqualTheLogProbsEntryOnEachAlone) {
  Tiny model(1);
  std::vector<Window> windows;
  for (size_t i = 0; i < 9; ++i) windows.push_back(Window{i, prompt(600 + i, 1 + i % 5), prompt(700 + i, 1 + i)});
  Evaluator ev(*model.model, 20);  // several packed calls
  std::vector<WindowScore> scores;
  ev.score(windows, scores);
  EXPECT_GT(ev.calls(), 1);
  for (size_t i = 0; i < windows.size(); ++i) {
    std::vector<int64_t> all(windows[i].context.begin(), windows[i].context.end());
    all.insert(all.end(), windows[i].scored.begin(), windows[i].scored.end());
    const int64_t n = static_cast<int64_t>(all.size()) - 1;
    std::vector<int64_t> pos(n), seg(n, 0), tgt(n, -1);
    for (int64_t k = 0; k < n; ++k) {
      pos[k] = k;
      if (k + 1 >= static_cast<int64_t>(windows[i].context.size())) tgt[k] = all[k + 1];
    }
    const auto lp = model->log_probs_packed(Tensor::from_ints({n}, std::vector<int64_t>(all.begin(), all.end() - 1)),
                                            Tensor::from_ints({n}, pos), Tensor::from_ints({n}, seg),
                                            Tensor::from_ints({n}, tgt, DType::i64))
                        .to_floats();
    double want = 0;
    for (float v : lp) want += v;
    EXPECT_NEAR(scores[i].loglikelihood, want, 1e-5 * std::abs(want)) << "window " << i;
    EXPECT_EQ(scores[i].tokens, static_cast<int64_t>(windows[i].scored.size()));
  }
}

// Rolling windows cover every token once, each window within max_len inputs, and their sum
// is the log-likelihood a direct loop over the same windows gives.
TEST(Evaluator, RollingWindowsScoreEveryTokenOnce) {
  const auto text = prompt(800, 50);
  const auto windows = rolling_windows(0, text, 1, 16);
  ASSERT_EQ(windows.size(), 4u);  // 16 + 16 + 16 + 2
  std::vector<int32_t> scored;
  for (const auto& w : windows) {
    EXPECT_LE(w.context.size() + w.scored.size(), 17u);
    scored.insert(scored.end(), w.scored.begin(), w.scored.end());
  }
  EXPECT_EQ(scored, text);
  EXPECT_EQ(windows[0].context, std::vector<int32_t>{1});
  EXPECT_EQ(windows[3].context, std::vector<int32_t>(text.begin() + 33, text.begin() + 48));  // 15 of context, 2 scored
  // Left truncation of a continuation request: the last max_len + 1 tokens.
  const Window w = continuation_window(0, prompt(1, 30), prompt(2, 5), 1, 16);
  EXPECT_EQ(w.context.size() + w.scored.size(), 17u);
  EXPECT_EQ(w.scored.size(), 5u);
}

// A document four windows long (MaxSeq 16, 50 tokens), scored by the evaluator in packed calls,
// against a direct computation: each window's input — the last 16 tokens of BOS + text before
// its end — through the `forward` entry, and log-softmax of the full logits at its new tokens.
TEST(Evaluator, RollingDocumentEqualsADirectComputation) {
  const auto text = prompt(801, 50);
  const int64_t max_len = 16;
  Tiny model(1);
  Evaluator ev(*model.model, 24);  // windows split across packed calls
  std::vector<WindowScore> scores;
  ev.score(rolling_windows(0, text, 1, max_len), scores);
  double got = 0;
  int64_t scored = 0;
  for (const auto& s : scores) got += s.loglikelihood, scored += s.tokens;
  std::vector<int64_t> full = {1};
  full.insert(full.end(), text.begin(), text.end());
  const int64_t n = static_cast<int64_t>(text.size()), vocab = model->generics().vocab;
  double want = 0;
  int64_t counted = 0;
  for (int64_t p = 0; p < n; p += max_len) {  // new tokens text[p, e)
    const int64_t e = std::min(n, p + max_len), s = std::max<int64_t>(0, e - max_len), len = e - s;
    const auto logits = model->forward(Tensor::from_ints({1, len}, std::vector<int64_t>(full.begin() + s, full.begin() + e)))
                            .to_floats();
    for (int64_t j = p; j < e; ++j, ++counted) {
      const float* row = logits.data() + (j - s) * vocab;
      double mx = row[0], sum = 0;
      for (int64_t v = 1; v < vocab; ++v) mx = std::max<double>(mx, row[v]);
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
      want += row[full[static_cast<size_t>(j + 1)]] - mx - std::log(sum);
    }
  }
  EXPECT_EQ(scored, n);
  EXPECT_EQ(counted, n);
  EXPECT_NEAR(got, want, 1e-4 * std::abs(want));
}

// A cancelled request (a client gone) frees its pages at once, waiting or running, and the
// others finish with the tokens they would have had.
TEST(Generator, CancelFreesPagesAndLeavesTheOthersAlone) {
  std::vector<Request> rs;
  for (size_t i = 0; i < 4; ++i) rs.push_back(request(i, prompt(900 + i, 5 + i), 20));
  Tiny model(4);
  Generator gen(*model.model, SchedulerLimits{0, 2, 64}, {});  // two run, two wait
  for (const auto& r : rs) ASSERT_EQ(gen.submit(r), "");
  gen.step();
  gen.step();
  ASSERT_EQ(gen.running(), 2u);
  const int64_t used = gen.pages().used_pages();
  EXPECT_TRUE(gen.cancel(0));  // running
  EXPECT_LT(gen.pages().used_pages(), used);
  EXPECT_TRUE(gen.cancel(3));  // waiting
  EXPECT_FALSE(gen.cancel(3));
  EXPECT_EQ(gen.running() + gen.waiting(), 2u);
  std::map<size_t, std::vector<int32_t>> out;
  while (!gen.idle())
    for (auto& c : gen.step()) out[c.index] = c.tokens;
  EXPECT_EQ(out.size(), 2u);
  for (size_t i : {size_t{1}, size_t{2}}) EXPECT_EQ(out.at(i), alone(rs[i].prompt, 20)) << "request " << i;
  EXPECT_EQ(gen.pages().used_pages(), 0);
}

// The n most likely tokens per scored position: their log-probabilities are the ones the
// targets get when they are those tokens, in order; a greedy target's equals the top-1 of the
// same call bit for bit.
TEST(Evaluator, TopTokensAreTheMostLikelyInOrder) {
  Tiny model(1);
  const auto all = prompt(950, 12);
  const int64_t n = 11;
  std::vector<int64_t> tok(all.begin(), all.end() - 1), pos(n), seg(n, 0), tgt(all.begin() + 1, all.end());
  for (int64_t k = 0; k < n; ++k) pos[k] = k;
  tgt[0] = -1;  // not scored
  TopTokens top;
  top.n = 4;
  auto [lp, greedy] = model->score_packed(Tensor::from_ints({n}, tok), Tensor::from_ints({n}, pos),
                                          Tensor::from_ints({n}, seg), Tensor::from_ints({n}, tgt, DType::i64), true, &top);
  ASSERT_EQ(top.ids.size(), static_cast<size_t>(n * 4));
  EXPECT_EQ(top.ids[0], -1);
  for (int64_t k = 1; k < n; ++k) {
    for (int64_t j = 0; j < 4; ++j) {
      // Scoring the j-th best as the target gives the same number (another call: other
      // shapes of the same matmuls, so to rounding).
      std::vector<int64_t> t2(static_cast<size_t>(n), -1);
      t2[k] = top.ids[k * 4 + j];
      const auto v = model->log_probs_packed(Tensor::from_ints({n}, tok), Tensor::from_ints({n}, pos),
                                             Tensor::from_ints({n}, seg), Tensor::from_ints({n}, t2, DType::i64))
                         .to_floats();
      EXPECT_NEAR(v[k], top.logprobs[k * 4 + j], 1e-5) << "position " << k << " rank " << j;
      if (j > 0) {
        EXPECT_LE(top.logprobs[k * 4 + j], top.logprobs[k * 4 + j - 1]);
      }
    }
    if (greedy[k]) {
      EXPECT_EQ(lp.to_floats()[k], top.logprobs[k * 4]) << "position " << k;
    } else {
      EXPECT_LT(lp.to_floats()[k], top.logprobs[k * 4]) << "position " << k;
    }
  }
}
