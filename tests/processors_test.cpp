// The sampling controls (issue 35 item 2) against transformers 5.24's own logits processors and
// generate (tests/fixtures/processors/processors.json, from tools/golden/make_processors.py):
// each chain of processors and warpers leaves the same scores and the same kept set; greedy
// generation with repetition_penalty, logit_bias, bad words and min_tokens gives transformers'
// tokens; and sampled runs with every control are the same alone and among others, at Shards
// 1 and 2. Also OpenAI's presence and frequency penalties (which transformers lacks) by their
// definition, and vLLM's priority in the scheduler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "engine/scheduler.h"
#include "layers/logit_processors.h"
#include "model_fixtures.h"
#include "mpi_run.h"
#include "runtime/loader.h"

using namespace linnet;
using namespace linnet::engine;
using namespace linnet::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const json& fixture() {
  static const json j = json::parse(slurp(fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/processors/processors.json"));
  return j;
}

// The fixture's fields (linnet's names; bad_words_ids as ids) into SamplingParams.
SamplingParams params_of(const json& f) {
  SamplingParams p;
  p.temperature = f.value("temperature", 0.0f);
  p.top_k = f.value("top_k", int64_t{0});
  p.top_p = f.value("top_p", 1.0f);
  p.min_p = f.value("min_p", 0.0f);
  p.repetition_penalty = f.value("repetition_penalty", 1.0f);
  p.min_tokens = f.value("min_tokens", int64_t{0});
  if (f.contains("logit_bias")) {
    std::map<int32_t, float> b;
    for (const auto& [k, v] : f["logit_bias"].items()) b[std::stoi(k)] = v.get<float>();
    p.logit_bias.assign(b.begin(), b.end());
  }
  if (f.contains("bad_words_ids")) p.bad_words = f["bad_words_ids"].get<std::vector<std::vector<int32_t>>>();
  return p;
}

}  // namespace

// Each chain: linnet's processors, then the temperature, then the kept set — the same scores
// as transformers' (−inf where it drops a token).
TEST(Processors, ChainsEqualTransformersProcessorsAndWarpers) {
  const json& fx = fixture();
  ASSERT_EQ(fx["chains"].size(), 24u);
  for (const json& c : fx["chains"]) {
    SCOPED_TRACE(c["params"].dump());
    const SamplingParams p = params_of(c["params"]);
    Sequence s;
    s.tokens = c["ids"].get<std::vector<int32_t>>();
    s.prompt_len = c["prompt_len"].get<int64_t>();
    s.request.params = p;
    if (p.uses_seen()) s.seen = distinct_ids(s.tokens);
    const std::vector<int32_t> banned = banned_ids(s, {fx["eos"].get<int32_t>()});
    LogitProcessors lp;
    lp.bias = p.logit_bias;
    lp.repetition_penalty = p.repetition_penalty;
    lp.seen = s.seen;
    lp.banned = banned;
    std::vector<float> l = c["logits"].get<std::vector<float>>();
    apply_logit_processors(lp, l.data(), 0, static_cast<int64_t>(l.size()));
    const float t = p.temperature > 0 ? p.temperature : 1.0f;
    // The kept set, as the model forms it: candidates by logit, the softmax's normaliser.
    std::vector<int32_t> order(l.size());
    for (size_t k = 0; k < l.size(); ++k) order[k] = static_cast<int32_t>(k);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    std::vector<float> sorted;
    for (int32_t k : order) sorted.push_back(l[static_cast<size_t>(k)]);
    float mx = -INFINITY;
    for (float x : l) mx = std::max(mx, x / t);
    double se = 0;
    for (float x : l) se += std::exp(static_cast<double>(x / t - mx));
    const size_t keep = p.temperature > 0 ? kept_candidates({t, p.top_k, p.top_p, p.min_p}, sorted, mx + std::log(se))
                                          : l.size();
    std::vector<bool> kept(l.size(), false);
    for (size_t n = 0; n < keep; ++n) kept[static_cast<size_t>(order[n])] = true;
    const json& want = c["expected"];
    for (size_t k = 0; k < l.size(); ++k) {
      const bool finite = std::isfinite(l[k]) && kept[k];
      ASSERT_EQ(finite, !want[k].is_null()) << "token " << k << ": linnet " << l[k] / t << (kept[k] ? " kept" : " dropped");
      if (finite) {
        EXPECT_NEAR(l[k] / t, want[k].get<float>(), 1e-5 * std::max(1.0f, std::abs(want[k].get<float>())))
            << "token " << k;
      }
    }
  }
}

// OpenAI's penalties (vLLM's): logit − frequency·count − presence·[count > 0], output ids only.
TEST(Processors, PresenceAndFrequencyPenaltiesAsOpenAIDefinesThem) {
  std::vector<float> l = {1.0f, 2.0f, -1.0f, 0.5f, 3.0f};
  const std::vector<int32_t> output = {1, 4, 1, 1};
  const auto counts = id_counts(output);
  LogitProcessors p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.counts = counts;
  // Shard 1 of two (ids 3, 4), then shard 0 (ids 0…2): each shard its own rows.
  apply_logit_processors(p, l.data() + 3, 3, 2);
  apply_logit_processors(p, l.data(), 0, 3);
  EXPECT_EQ(l, (std::vector<float>{1.0f, 2.0f - 0.75f - 0.5f, -1.0f, 0.5f, 3.0f - 0.25f - 0.5f}));
}

// Greedy with the controls through the batch engine: transformers' generate tokens (stopping at
// EOS after min_tokens) — alone, and among others without controls and with other controls.
TEST(Processors, GreedyWithControlsEqualsTransformersGenerate) {
  const json& fx = fixture();
  auto backend = make_backend("cpu");
  SingleCommunicator comm;
  RunOptions o;
  o.batch = 8;
  o.max_seq = 64;
  o.page_size = 8;
  LoadedModel m = load_model((fs::path(LINNET_SOURCE_DIR) / fx["model"].get<std::string>()).string(), o, *backend, comm);
  const std::vector<int32_t> prompt = fx["prompt"].get<std::vector<int32_t>>();
  for (bool together : {false, true}) {
    Generator gen(*m.model, SchedulerLimits{0, 256, 64}, {fx["eos"].get<int32_t>()});
    size_t index = 0;
    for (const json& g : fx["greedy"]) {
      Request r;
      r.index = index++;
      r.prompt = prompt;
      r.params = params_of(g["fields"]);
      r.params.max_new_tokens = fx["steps"].get<int64_t>();
      ASSERT_EQ(gen.submit(r), "");
      if (!together) {
        std::vector<int32_t> got;
        while (!gen.idle())
          for (auto& c : gen.step()) got = c.tokens;
        EXPECT_EQ(got, g["tokens"].get<std::vector<int32_t>>()) << g["name"];
      }
    }
    if (!together) continue;
    Request plain;  // a neighbour without controls, and the same prompt
    plain.index = index++;
    plain.prompt = prompt;
    plain.params.max_new_tokens = fx["steps"].get<int64_t>();
    ASSERT_EQ(gen.submit(plain), "");
    std::map<size_t, std::vector<int32_t>> got;
    while (!gen.idle())
      for (auto& c : gen.step()) got[c.index] = c.tokens;
    for (size_t i = 0; i < fx["greedy"].size(); ++i)
      EXPECT_EQ(got[i], fx["greedy"][i]["tokens"].get<std::vector<int32_t>>()) << fx["greedy"][i]["name"] << " among others";
    std::vector<int32_t> without = fx["greedy_without"].get<std::vector<int32_t>>();
    auto stop = std::find(without.begin(), without.end(), fx["eos"].get<int32_t>());
    if (stop != without.end()) without.erase(stop + 1, without.end());
    EXPECT_EQ(got[plain.index], without);
  }
}

namespace {
// The tests' checkpoint folder for the CLI: the gqa fixture with the tests' byte-level
// tokenizer (its ids below 256 are the model's).
fs::path gqa_with_tokenizer() {
  return shared_checkpoint("processors_gqa", [](const std::string& d) {
    fs::create_directories(d);
    const fs::path src = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden/gqa";
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(src / f, fs::path(d) / f);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval/model" / f, fs::path(d) / f);
  });
}
}  // namespace

// `linnet generate` lines with the controls: greedy ones give transformers' tokens, sampled ones
// (seeded, with every control) the same tokens alone and together, on one rank and on two.
TEST(Processors, GenerateLinesOnOneAndTwoRanks) {
  const json& fx = fixture();
  const fs::path d = fresh_dir("processors_cli"), ckpt = gqa_with_tokenizer();
  std::vector<json> lines;
  std::vector<std::vector<int32_t>> want;
  for (const json& g : fx["greedy"]) {
    if (g["fields"].contains("bad_words_ids")) continue;  // bad words are strings on a line (tested in-process above)
    json line = g["fields"];
    line["id"] = g["name"];
    line["tokens"] = fx["prompt"];
    line["max_new_tokens"] = fx["steps"];
    lines.push_back(line);
    want.push_back(g["tokens"].get<std::vector<int32_t>>());
  }
  const size_t greedy = lines.size();
  for (int k = 0; k < 4; ++k)
    lines.push_back({{"id", "sampled" + std::to_string(k)}, {"tokens", fx["prompt"]}, {"max_new_tokens", 12},
                     {"temperature", 0.9}, {"seed", 100 + k}, {"top_k", 40}, {"top_p", 0.95}, {"min_p", 0.02},
                     {"repetition_penalty", 1.1}, {"presence_penalty", 0.4}, {"frequency_penalty", 0.2},
                     {"logit_bias", {{"77", 2.0}}}, {"min_tokens", 2}, {"bad_words", {"z"}}});
  {
    std::ofstream all(d / "all.jsonl"), one(d / "one.jsonl");
    for (const auto& l : lines) all << l.dump() << "\n";
    one << lines.back().dump() << "\n";
  }
  auto run = [&](const fs::path& in, int np) {
    const fs::path out = d / ("out" + std::to_string(np) + in.stem().string() + ".jsonl");
    const auto r = linnet_run({"generate", "--checkpoint", ckpt.string(), "--prompts", in.string(), "--output",
                               out.string(), "--overwrite", "--backend", "cpu", "--max-seq", "64"},
                              180, np);
    if (np > 0 && r.output.find("mpirun not found") != std::string::npos) return std::vector<json>{};
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return read_jsonl(out);
  };
  const auto one_rank = run(d / "all.jsonl", 0);
  ASSERT_EQ(one_rank.size(), lines.size());
  for (size_t i = 0; i < greedy; ++i)
    EXPECT_EQ(one_rank[i]["tokens"].get<std::vector<int32_t>>(), want[i]) << one_rank[i]["id"];
  const auto alone = run(d / "one.jsonl", 0);
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(alone[0]["tokens"], one_rank.back()["tokens"]) << "a sampled line alone and among others";
  const auto two_ranks = run(d / "all.jsonl", 2);
  if (two_ranks.empty()) GTEST_SKIP() << "mpirun not found";
  ASSERT_EQ(two_ranks.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i)
    EXPECT_EQ(two_ranks[i]["tokens"], one_rank[i]["tokens"]) << lines[i]["id"] << " at Shards 2";
  fs::remove_all(d);
}

// vLLM's priority: lower values run first; the waiting line and preemption follow it.
TEST(Processors, PriorityOrdersTheWaitingLine) {
  PageAllocator pages(16, 4);
  Scheduler s(pages, SchedulerLimits{64, 1, 64});  // one row at a time
  auto request = [](size_t index, int64_t priority) {
    Request r;
    r.index = index;
    r.prompt = {1, 2, 3};
    r.params.max_new_tokens = 1;
    r.params.priority = priority;
    return r;
  };
  ASSERT_EQ(s.submit(request(0, 5)), "");
  ASSERT_EQ(s.submit(request(1, 0)), "");
  ASSERT_EQ(s.submit(request(2, -3)), "");
  ASSERT_EQ(s.submit(request(3, 0)), "");
  std::vector<size_t> order;
  while (!s.idle()) {
    const auto rows = s.schedule();
    for (const auto& c : s.complete(rows, std::vector<int32_t>(rows.size(), 9), {}, {})) order.push_back(c.index);
  }
  EXPECT_EQ(order, (std::vector<size_t>{2, 1, 3, 0}));
}
