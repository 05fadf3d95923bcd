// Greedy generation through the batch engine (what `linnet generate`, `serve` and `run-batch`
// run) against transformers' own `generate`, on the issue-34 fixtures (tools/golden):
//   - Phi-3's longrope past original_max_position_embeddings: transformers drops its cache when
//     a sequence reaches original + 1 tokens and recomputes every key with the long factors;
//     the engine recomputes that sequence at the same step — alone, among others, preempted;
//   - a bf16 model whose greedy run has a step where the two best f32 logits round to one bf16
//     value: tokens are chosen on the f32 logits (the values log-probs report), as transformers
//     chooses them, and a greedy token is its own top-1;
//   - `linnet generate` on one and two ranks gives the same tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "checkpoint/safetensors.h"
#include "engine/evaluator.h"
#include "engine/generator.h"
#include "model_fixtures.h"
#include "mpi_run.h"
#include "runtime/loader.h"

using namespace linnet;
using namespace linnet::engine;
using namespace linnet::testing;
namespace fs = std::filesystem;

namespace {

const fs::path kGolden = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden";

struct Reference {
  std::vector<std::vector<int32_t>> prompts, tokens;  // per row
};

Reference reference(const std::string& name) {
  SafetensorsFile g((kGolden / name / "golden.safetensors").string());
  const Tensor p = g.read("greedy_prompt"), t = g.read("greedy_tokens");
  Reference r;
  const auto pv = p.to_ints(), tv = t.to_ints();
  for (int64_t b = 0; b < p.dim(0); ++b) {
    r.prompts.emplace_back(pv.begin() + b * p.dim(1), pv.begin() + (b + 1) * p.dim(1));
    r.tokens.emplace_back(tv.begin() + b * t.dim(1), tv.begin() + (b + 1) * t.dim(1));
  }
  return r;
}

// The reference's rows through the engine (each row `copies` times), greedy, no EOS: tokens by
// request index; `preemptions` gets the engine's count.
std::map<size_t, std::vector<int32_t>> engine_greedy(const std::string& name, int64_t batch, int copies,
                                                     int64_t* preemptions = nullptr, int64_t max_seq = 32,
                                                     int64_t max_pages = 0) {
  const Reference ref = reference(name);
  auto backend = make_backend("cpu");
  SingleCommunicator comm;
  RunOptions o;
  o.batch = batch;
  o.max_seq = max_seq;
  o.page_size = 8;
  LoadedModel m = load_model((kGolden / name).string(), o, *backend, comm);
  SchedulerLimits limits{0, 256, 64};
  limits.max_pages = max_pages;
  Generator gen(*m.model, limits, {});
  size_t index = 0;
  for (int c = 0; c < copies; ++c)
    for (size_t b = 0; b < ref.prompts.size(); ++b) {
      Request r;
      r.index = index++;
      r.prompt = ref.prompts[b];
      r.params.max_new_tokens = static_cast<int64_t>(ref.tokens[b].size());
      r.params.ignore_eos = true;
      EXPECT_EQ(gen.submit(r), "");
    }
  std::map<size_t, std::vector<int32_t>> out;
  while (!gen.idle())
    for (auto& c : gen.step()) out[c.index] = c.tokens;
  if (preemptions) *preemptions = gen.stats().preemptions;
  // A model with a recurrent state (issue 40): every slot back once nothing runs.
  EXPECT_EQ(gen.free_state_slots(), m.model->config().any_linear() ? static_cast<size_t>(batch) : 0u);
  return out;
}

void expect_transformers_tokens(const std::string& name, const std::map<size_t, std::vector<int32_t>>& got) {
  const Reference ref = reference(name);
  ASSERT_FALSE(got.empty());
  for (const auto& [i, tokens] : got) EXPECT_EQ(tokens, ref.tokens[i % ref.tokens.size()]) << name << " request " << i;
}

}  // namespace

// issue 34 item 1: prompts of 10 and of exactly 16 tokens (original 16), generated past 17.
TEST(ExactGeneration, Phi3LongropePastItsOriginalLengthEqualsTransformersGenerate) {
  for (const char* name : {"phi3_longrope_decode", "phi3_longrope_decode16_bf16"}) {
    SCOPED_TRACE(name);
    expect_transformers_tokens(name, engine_greedy(name, 4, 1));
    // Among copies of themselves: every row crosses in the same step as others decode.
    expect_transformers_tokens(name, engine_greedy(name, 8, 3));
  }
}

// The same with a pool of two rows' pages for four sequences: sequences are preempted and
// recomputed (before and after the crossing), and still equal transformers' tokens.
TEST(ExactGeneration, Phi3LongropeCrossingSurvivesPreemption) {
  for (const char* name : {"phi3_longrope_decode", "phi3_longrope_decode16_bf16"}) {
    SCOPED_TRACE(name);
    int64_t preempted = 0;
    expect_transformers_tokens(name, engine_greedy(name, 2, 2, &preempted));
    EXPECT_GT(preempted, 0) << "the pool was meant to run out";
  }
}

// issue 34 item 2: the fixture's prompts were drawn until a greedy step's two best f32 logits
// round to one bf16 value with the lower id second (an argmax over bf16-rounded logits picks
// the other token), every f32 gap above 1e-4. The engine and the `generate` entry choose on
// the f32 logits: transformers' tokens, all 40 steps.
TEST(ExactGeneration, Bf16GreedyChoosesOnTheF32Logits) {
  const std::string name = "bf16_near_ties_bf16";
  expect_transformers_tokens(name, engine_greedy(name, 4, 1, nullptr, 64));
  expect_transformers_tokens(name, engine_greedy(name, 8, 3, nullptr, 64));
  // The card's generate entry, Batch 2 at once.
  const Reference ref = reference(name);
  auto backend = make_backend("cpu");
  SingleCommunicator comm;
  RunOptions o;
  o.batch = 2;
  o.max_seq = 64;
  o.page_size = 16;
  LoadedModel m = load_model((kGolden / name).string(), o, *backend, comm);
  const int64_t s0 = static_cast<int64_t>(ref.prompts[0].size());
  std::vector<int64_t> head, last;
  for (const auto& p : ref.prompts) {
    head.insert(head.end(), p.begin(), p.end() - 1);
    last.push_back(p.back());
  }
  m.model->prefill(Tensor::from_ints({2, s0 - 1}, head), 0);
  const auto gen = m.model->generate(Tensor::from_ints({2, 1}, last), static_cast<int32_t>(s0 - 1), 40).to_ints();
  for (size_t b = 0; b < 2; ++b)
    for (size_t i = 0; i < 40; ++i) EXPECT_EQ(gen[b * 40 + i], ref.tokens[b][i]) << "row " << b << " step " << i;
}

// A greedy token is its own top-1: scoring what the engine generated, each generated token is
// the argmax (is_greedy) and the most likely of the top list, with the same log-probability
// (serve.md's promise, which lm-eval's is_greedy relies on).
TEST(ExactGeneration, AGreedyTokenIsItsOwnTopOne) {
  const std::string name = "bf16_near_ties_bf16";
  Reference ref = reference(name);
  const auto generated = engine_greedy(name, 4, 1, nullptr, 64);
  ASSERT_EQ(generated.size(), ref.tokens.size());
  for (const auto& [i, tokens] : generated) ref.tokens[i] = tokens;
  auto backend = make_backend("cpu");
  SingleCommunicator comm;
  RunOptions o;
  o.batch = 2;
  o.max_seq = 64;
  o.page_size = 16;
  LoadedModel m = load_model((kGolden / name).string(), o, *backend, comm);
  for (size_t b = 0; b < ref.prompts.size(); ++b) {
    std::vector<int64_t> seq(ref.prompts[b].begin(), ref.prompts[b].end()), pos, segs, tgt;
    seq.insert(seq.end(), ref.tokens[b].begin(), ref.tokens[b].end());
    const int64_t n = static_cast<int64_t>(seq.size()), s0 = static_cast<int64_t>(ref.prompts[b].size());
    for (int64_t j = 0; j < n; ++j) {
      pos.push_back(j), segs.push_back(0);
      tgt.push_back(j + 1 < n && j + 1 >= s0 ? seq[static_cast<size_t>(j + 1)] : -1);
    }
    TopTokens top;
    top.n = 2;
    auto [lp, greedy] = m.model->score_packed(Tensor::from_ints({n}, seq, DType::i32), Tensor::from_ints({n}, pos, DType::i32),
                                              Tensor::from_ints({n}, segs, DType::i32), Tensor::from_ints({n}, tgt, DType::i64),
                                              true, &top);
    const auto lps = lp.to_floats();
    for (int64_t j = s0 - 1; j + 1 < n; ++j) {
      EXPECT_TRUE(greedy[static_cast<size_t>(j)]) << "row " << b << " token " << j + 1;
      EXPECT_EQ(top.ids[static_cast<size_t>(j * 2)], tgt[static_cast<size_t>(j)]) << "row " << b << " token " << j + 1;
      EXPECT_EQ(top.logprobs[static_cast<size_t>(j * 2)], lps[static_cast<size_t>(j)]) << "row " << b << " token " << j + 1;
    }
  }
}

// issue 40: Qwen3.5's Gated DeltaNet layers keep a recurrent state per sequence in a slot of
// its own. 130-token prompts (past transformers' chunks of 64), 96 greedy steps: alone, among
// copies of themselves (prefill cut into other chunks, decoding beside prefills), and preempted
// (four slots, a pool of two rows' pages: each recomputed from its start into a fresh slot) —
// transformers' tokens every time, and every slot back when the engine is idle.
TEST(ExactGeneration, Qwen3_5RecurrentStateThroughTheEngineEqualsTransformersGenerate) {
  for (const char* name : {"qwen3_5", "qwen3_5_bf16", "qwen3_5_moe", "qwen3_next"}) {
    SCOPED_TRACE(name);
    expect_transformers_tokens(name, engine_greedy(name, 4, 1, nullptr, 256));
    expect_transformers_tokens(name, engine_greedy(name, 8, 3, nullptr, 256));
    int64_t preempted = 0;
    expect_transformers_tokens(name, engine_greedy(name, 4, 2, &preempted, 256, 2 * 256 / 8));
    EXPECT_GT(preempted, 0) << "the pool was meant to run out";
  }
}

// Prefix sharing on a recurrent state (issue 40): prompts that are the reference's first prompt
// followed by the first m of transformers' greedy tokens (so transformers' tokens after them are
// tokens[m:]) share that prompt and more as their prefix, in pages of 8 with steps of 64 tokens:
// a later one shares the published pages up to where a snapshot of the state was kept, restores
// it and computes only the rest; where the shared pages end without a snapshot (its branch point)
// it recomputes and keeps one there for the next. Every request's tokens equal transformers' —
// with Batch snapshots, with one (each kept state soon given up for the next), and with none
// (no page shared) — and the snapshots let the engine skip prompt tokens.
TEST(ExactGeneration, Qwen3_5SharedPrefixRestoresItsStateFromASnapshot) {
  for (const char* name : {"qwen3_5", "qwen3_next"}) {
    SCOPED_TRACE(name);
    const Reference ref = reference(name);
    const std::vector<int64_t> extra = {40, 20, 25, 5, 0, 0, 41, 20};  // (two alike, and extensions of each other)
    std::map<int64_t, int64_t> restored, computed;
    for (const int64_t snapshots : {int64_t{-1}, int64_t{1}, int64_t{0}}) {
      SCOPED_TRACE(snapshots);
      auto backend = make_backend("cpu");
      SingleCommunicator comm;
      RunOptions o;
      o.batch = 4;
      o.max_seq = 256;
      o.page_size = 8;
      if (snapshots >= 0) o.state_snapshots = snapshots;
      LoadedModel m = load_model((kGolden / name).string(), o, *backend, comm);
      Generator gen(*m.model, SchedulerLimits{0, 256, 64}, {});
      const std::vector<int32_t>& t = ref.tokens[0];
      for (size_t i = 0; i < extra.size(); ++i) {
        Request r;
        r.index = i;
        r.prompt = ref.prompts[0];
        r.prompt.insert(r.prompt.end(), t.begin(), t.begin() + extra[i]);
        r.params.max_new_tokens = static_cast<int64_t>(t.size()) - extra[i];
        r.params.ignore_eos = true;
        ASSERT_EQ(gen.submit(r), "");
      }
      std::map<size_t, std::vector<int32_t>> out;
      while (!gen.idle())
        for (auto& c : gen.step()) out[c.index] = c.tokens;
      ASSERT_EQ(out.size(), extra.size());
      for (size_t i = 0; i < extra.size(); ++i)
        EXPECT_EQ(out[i], std::vector<int32_t>(t.begin() + extra[i], t.end())) << "request " << i;
      restored[snapshots] = gen.stats().restored_tokens;
      computed[snapshots] = gen.stats().prefill_tokens;
      EXPECT_EQ(gen.free_state_slots(), 4u);
      EXPECT_EQ(gen.free_snapshots(), static_cast<size_t>(snapshots < 0 ? 4 : snapshots)) << "every page went back";
    }
    std::printf("%s: prompt tokens computed with 4 / 1 / 0 snapshots: %lld / %lld / %lld (restored %lld / %lld / %lld)\n",
                name, static_cast<long long>(computed[-1]), static_cast<long long>(computed[1]),
                static_cast<long long>(computed[0]), static_cast<long long>(restored[-1]),
                static_cast<long long>(restored[1]), static_cast<long long>(restored[0]));
    EXPECT_GT(restored[-1], 0);
    EXPECT_GT(restored[1], 0);
    EXPECT_EQ(restored[0], 0);
    EXPECT_EQ(computed[-1] + restored[-1], computed[0]);
  }
}

// The same prompts through `linnet generate` on 1, 2 and 4 ranks (Shards 2 and 4 split the Gated
// DeltaNet heads, their states and snapshots): every rank keeps and restores the same snapshots,
// and the tokens are transformers'.
TEST(ExactGeneration, Qwen3_5SharedPrefixOnOneTwoAndFourRanks) {
  const std::string name = "qwen3_5";
  const fs::path d = fresh_dir("exact_prefix_" + name), ckpt = d / "model";
  fs::create_directories(ckpt);
  for (const auto& e : fs::directory_iterator(kGolden / name)) fs::copy_file(e.path(), ckpt / e.path().filename());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval/model" / f, ckpt / f);
  const Reference ref = reference(name);
  const std::vector<int32_t>& t = ref.tokens[0];
  const std::vector<int64_t> extra = {40, 20, 25, 5, 0, 0};
  {
    std::ofstream in(d / "in.jsonl");
    for (size_t i = 0; i < extra.size(); ++i) {
      std::vector<int32_t> prompt = ref.prompts[0];
      prompt.insert(prompt.end(), t.begin(), t.begin() + extra[i]);
      in << nlohmann::json{{"id", i}, {"tokens", prompt}, {"max_new_tokens", static_cast<int64_t>(t.size()) - extra[i]}}.dump()
         << "\n";
    }
  }
  // (and two pipeline stages of two shards: each stage keeps and restores its own layers' snapshots,
  // a step's rows in two micro-batches)
  for (const auto& [np, more] : std::vector<std::pair<int, std::vector<std::string>>>{
           {0, {}}, {2, {}}, {4, {}}, {4, {"--pp", "2"}}}) {
    std::vector<std::string> args = {"generate", "--checkpoint", ckpt.string(), "--prompts", (d / "in.jsonl").string(),
                                     "--output", (d / "out.jsonl").string(), "--overwrite", "--backend", "cpu",
                                     "--ignore-eos", "--max-seq", "256", "--page-size", "8", "--batch", "4"};
    args.insert(args.end(), more.begin(), more.end());
    const auto r = linnet_run(args, 300, np);
    if (np > 0 && r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // (the shared prefixes were restored, not recomputed: generate's log counts them)
    EXPECT_NE(r.errors.find("more restored from state snapshots"), std::string::npos) << "np " << np << ": " << r.errors;
    const auto out = read_jsonl(d / "out.jsonl");
    ASSERT_EQ(out.size(), extra.size());
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_EQ(out[i]["tokens"].get<std::vector<int32_t>>(), std::vector<int32_t>(t.begin() + extra[i], t.end()))
          << "np " << np << " request " << i;
  }
  fs::remove_all(d);
}

// `linnet generate` (token-id prompts) on one rank and on two: transformers' tokens for the
// Phi-3 crossing and the bf16 near ties (the fixture gets the tests' byte-level tokenizer).
TEST(ExactGeneration, GenerateCommandOnOneAndTwoRanks) {
  for (const char* name : {"phi3_longrope_decode", "bf16_near_ties_bf16"}) {
    SCOPED_TRACE(name);
    const fs::path d = fresh_dir(std::string("exact_") + name), ckpt = d / "model";
    fs::create_directories(ckpt);
    for (const auto& e : fs::directory_iterator(kGolden / name)) fs::copy_file(e.path(), ckpt / e.path().filename());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval/model" / f, ckpt / f);
    const Reference ref = reference(name);
    {
      std::ofstream in(d / "in.jsonl");
      for (size_t b = 0; b < ref.prompts.size(); ++b)
        in << nlohmann::json{{"id", b}, {"tokens", ref.prompts[b]}}.dump() << "\n";
    }
    for (int np : {0, 2}) {
      const auto r = linnet_run({"generate", "--checkpoint", ckpt.string(), "--prompts", (d / "in.jsonl").string(),
                                 "--output", (d / "out.jsonl").string(), "--overwrite", "--backend", "cpu",
                                 "--max-new-tokens", std::to_string(ref.tokens[0].size()), "--ignore-eos",
                                 "--max-seq", "64"},
                                180, np);
      if (np > 0 && r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const auto out = read_jsonl(d / "out.jsonl");
      ASSERT_EQ(out.size(), ref.prompts.size());
      for (size_t b = 0; b < out.size(); ++b)
        EXPECT_EQ(out[b]["tokens"].get<std::vector<int32_t>>(), ref.tokens[b]) << "np " << np << " row " << b;
    }
    fs::remove_all(d);
  }
}
