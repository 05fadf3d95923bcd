// `linnet eval` against lm-evaluation-harness's hf backend: the numbers tools/lm_eval made with
// lm-eval 0.4.13 on a small model (tests/fixtures/lm_eval), loglikelihood (multiple choice,
// is_greedy) and loglikelihood_rolling (word/byte perplexity, bits per byte), to 1e-4 — on one
// rank and on two (Shards 2, and two replicas). Then malformed lines and token-id inputs.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model_fixtures.h"
#include "mpi_run.h"

using linnet::testing::linnet_run;
namespace fs = std::filesystem;
using nlohmann::json;

using linnet::testing::fresh_dir;

namespace {

const fs::path kFixture = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval";

std::map<std::string, json> results(const fs::path& p) {
  std::map<std::string, json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) {
      const json j = json::parse(line);
      out[j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump()] = j;
    }
  return out;
}

std::vector<std::string> args(const fs::path& data, const fs::path& out, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"eval",  "--checkpoint", (kFixture / "model").string(), "--data", data.string(),
                                "--output", out.string(), "--backend", "cpu"};
  a.insert(a.end(), more.begin(), more.end());
  // The tests reuse their output files: replacing them is what they mean unless they resume.
  if (std::find(more.begin(), more.end(), "--resume") == more.end()) a.push_back("--overwrite");
  return a;
}

void expect_close(double got, double want, const std::string& what, double bound = 1e-4) {
  EXPECT_LE(std::abs(got - want), bound * std::max(1.0, std::abs(want))) << what << ": " << got << " vs " << want;
}

// linnet's multiple-choice results `m` against lm-eval's requests `docs`: every loglikelihood,
// and each is_greedy flag `flag` says to compare (the count of those is returned); then `more`
// on each (request, linnet's document, index).
size_t check_mc(const json& docs, const std::map<std::string, json>& m, const std::function<bool(const json&)>& flag,
                const std::function<void(const json&, const json&, size_t, const std::string&)>& more = {},
                double bound = 1e-4) {
  size_t requests = 0, flags = 0;
  for (const json& doc : docs) {
    const json& got = m.at(doc["id"].get<std::string>());
    EXPECT_EQ(got["loglikelihood"].size(), doc["requests"].size());
    for (size_t k = 0; k < doc["requests"].size() && k < got["loglikelihood"].size(); ++k, ++requests) {
      const json& want = doc["requests"][k];
      const std::string what = doc["id"].get<std::string>() + " choice " + std::to_string(k);
      expect_close(got["loglikelihood"][k].get<double>(), want["loglikelihood"].get<double>(), what, bound);
      if (flag(want)) {
        EXPECT_EQ(got["is_greedy"][k], want["is_greedy"]) << what;
        ++flags;
      }
      if (more) more(want, got, k, what);
    }
  }
  EXPECT_EQ(requests, 48u);
  return flags;
}

void check_against_lm_eval(const fs::path& mc, const fs::path& rolling, const std::string& how) {
  SCOPED_TRACE(how);
  const json e = json::parse(std::ifstream(kFixture / "expected.json"));
  const auto m = results(mc), r = results(rolling);
  check_mc(e["mc"]["docs"], m, [](const json&) { return true; },
           [](const json& want, const json& got, size_t k, const std::string& what) {
             EXPECT_EQ(got["tokens"][k], want["continuation_enc"].size()) << what;
           });
  double ll = 0;
  int64_t words = 0, bytes = 0;
  for (const json& doc : e["rolling"]["docs"]) {
    const json& got = r.at(doc["id"].get<std::string>());
    const std::string what = doc["id"].get<std::string>();
    expect_close(got["loglikelihood"].get<double>(), doc["loglikelihood"].get<double>(), what);
    EXPECT_EQ(got["tokens"], doc["tokens_scored"]) << what;
    EXPECT_EQ(got["words"], doc["words"]) << what;
    EXPECT_EQ(got["bytes"], doc["bytes"]) << what;
    ll += got["loglikelihood"].get<double>();
    words += got["words"].get<int64_t>();
    bytes += got["bytes"].get<int64_t>();
  }
  // lm-eval's aggregates: Σ ll over Σ words / bytes.
  const json& agg = e["rolling"]["aggregates"];
  const double word_ppl = std::exp(-ll / words), byte_ppl = std::exp(-ll / bytes), bpb = -ll / bytes / std::log(2.0);
  EXPECT_LE(std::abs(word_ppl / agg["word_perplexity"].get<double>() - 1), 1e-4);
  EXPECT_LE(std::abs(byte_ppl / agg["byte_perplexity"].get<double>() - 1), 1e-4);
  EXPECT_LE(std::abs(bpb - agg["bits_per_byte"].get<double>()), 1e-4);
}

}  // namespace

TEST(Eval, MatchesLmEvaluationHarness) {
  const fs::path d = fresh_dir("lm_eval");
  auto r = linnet_run(args(kFixture / "mc.jsonl", d / "mc.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_NE(r.output.find("eval: 18 documents"), std::string::npos) << r.output;
  r = linnet_run(args(kFixture / "rolling.jsonl", d / "rolling.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_NE(r.output.find("rolling: word_perplexity"), std::string::npos) << r.output;
  check_against_lm_eval(d / "mc.jsonl", d / "rolling.jsonl", "one rank");
  for (const char* tp : {"2", "1"}) {
    r = linnet_run(args(kFixture / "mc.jsonl", d / "mc2.jsonl", {"--tp", tp}), 120, 2);
    if (r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    r = linnet_run(args(kFixture / "rolling.jsonl", d / "rolling2.jsonl", {"--tp", tp, "--max-batch-tokens", "64"}), 120, 2);
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    check_against_lm_eval(d / "mc2.jsonl", d / "rolling2.jsonl", std::string("two ranks, --tp ") + tp);
  }
}

namespace {

// `linnet eval` on tests/fixtures/lm_eval/model_<name> at --tp 1 and 2 against
// expected_<name>.json (lm-eval's numbers on that checkpoint): loglikelihoods to `bound`, the
// is_greedy flags whose margin is above 1e-3 (at least `least_flags` of them), bits per byte.
void expect_lm_eval_numbers(const std::string& name, double bound, size_t least_flags) {
  const json e = json::parse(std::ifstream(kFixture / ("expected_" + name + ".json")));
  const fs::path d = fresh_dir("lm_eval_" + name);
  for (const char* tp : {"1", "2"}) {
    SCOPED_TRACE(std::string("--tp ") + tp);
    const int ranks = std::string(tp) == "2" ? 2 : 1;
    std::vector<std::string> mc = args(kFixture / "mc.jsonl", d / "mc.jsonl", {"--tp", tp});
    std::vector<std::string> rolling = args(kFixture / "rolling.jsonl", d / "rolling.jsonl", {"--tp", tp});
    for (auto* a : {&mc, &rolling})
      *std::find(a->begin(), a->end(), (kFixture / "model").string()) = (kFixture / ("model_" + name)).string();
    auto r = linnet_run(mc, 120, ranks);
    if (r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    r = linnet_run(rolling, 120, ranks);
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    const auto m = results(d / "mc.jsonl"), ro = results(d / "rolling.jsonl");
    const size_t flags = check_mc(
        e["mc"]["docs"], m, [](const json& want) { return std::abs(want["greedy_margin"].get<double>()) > 1e-3; }, {},
        bound);
    EXPECT_GE(flags, least_flags);
    double ll = 0;
    int64_t bytes = 0;
    for (const json& doc : e["rolling"]["docs"]) {
      const json& got = ro.at(doc["id"].get<std::string>());
      expect_close(got["loglikelihood"].get<double>(), doc["loglikelihood"].get<double>(), doc["id"].get<std::string>(),
                   bound);
      ll += got["loglikelihood"].get<double>();
      bytes += got["bytes"].get<int64_t>();
    }
    EXPECT_LE(std::abs(-ll / bytes / std::log(2.0) - e["rolling"]["aggregates"]["bits_per_byte"].get<double>()), bound);
  }
}

}  // namespace

// Quantized checkpoints of the same model (compressed-tensors W4A16, FP8 dynamic, W8A8 and
// MXFP4A16, GPTQ with act-order, AWQ, Hugging Face's FP8 blocks;
// tools/lm_eval/make_quantized_fixture.py) against lm-eval's hf backend: on the first three
// transformers decompresses each layer (and rounds FP8's and W8A8's activations per token); the
// other four run on the checkpoint's dense twin (each layer as its format's reader dequantizes
// it: transformers has no CPU path for them in f32). linnet reads the stored bits. Loglikelihoods to 1e-4; an is_greedy flag is compared where the continuation's
// least top-1 margin is above 1e-3 (a near tie may go either way in another f32 order of summation).
// W8A8 to 1e-2, its relative bound against transformers (docs/quantization.md): its activations
// have 255 levels a token, and an input within f32 noise of a rounding boundary (x/s at k + ½)
// rounds either way in another order of summation; here some 2.5e-3 of a loglikelihood.
class EvalOnAQuantizedCheckpoint : public ::testing::TestWithParam<std::string> {};

TEST_P(EvalOnAQuantizedCheckpoint, MatchesLmEvaluationHarness) {
  expect_lm_eval_numbers(GetParam(), GetParam() == "w8a8" ? 1e-2 : 1e-4, 40);
}

// A hybrid linear-attention model (issue 40: tools/lm_eval/make_hybrid_fixture.py, a Qwen3.5 of
// four layers, three Gated DeltaNet): transformers runs each request by its chunked delta rule,
// linnet a request's aligned chunk (a 64-token window) by its chunked form and the rest token by
// token; at --tp 2 each rank holds half the DeltaNet heads and their states.
TEST(Eval, AHybridMatchesLmEvaluationHarness) { expect_lm_eval_numbers("qwen3_5", 1e-4, 40); }

INSTANTIATE_TEST_SUITE_P(Formats, EvalOnAQuantizedCheckpoint, ::testing::Values("w4a16", "fp8_dynamic", "w8a8", "mxfp4", "gptq", "awq",
                                                                             "fp8_block"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(Eval, TokenIdsAndSingleContinuations) {
  const fs::path d = fresh_dir("ids");
  std::ofstream(d / "in.jsonl") << R"({"id": "x", "context_tokens": [0, 644, 283], "continuation_tokens": [69, 84]})" "\n"
                                << R"({"id": "y", "context_tokens": [0, 644, 283], "continuation_tokens": [[69, 84], [77]]})" "\n"
                                << R"({"id": "z", "context": "The capital of France is", "continuation": " Paris"})" "\n";
  const auto r = linnet_run(args(d / "in.jsonl", d / "out.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  const auto out = results(d / "out.jsonl");
  EXPECT_TRUE(out.at("x")["loglikelihood"].is_number());
  EXPECT_EQ(out.at("x")["tokens"], 2);
  ASSERT_EQ(out.at("y")["loglikelihood"].size(), 2u);
  EXPECT_EQ(out.at("y")["loglikelihood"][0], out.at("x")["loglikelihood"]);
  const json e = json::parse(std::ifstream(kFixture / "expected.json"));
  expect_close(out.at("z")["loglikelihood"].get<double>(), e["mc"]["docs"][0]["requests"][0]["loglikelihood"].get<double>(),
               "mc-00 Paris as a single continuation");
}

TEST(Eval, MalformedLinesAreNamed) {
  const fs::path d = fresh_dir("bad");
  std::ofstream(d / "in.jsonl") << R"({"id": "ok", "text": "Hello world."})" "\n"
                                << "not json\n"
                                << R"({"id": "t"})" "\n"
                                << R"({"id": "e", "text": ""})" "\n"
                                << R"({"id": "i", "context_tokens": [1], "continuation_tokens": [5000]})" "\n"
                                << R"({"id": "k", "text": "x", "label": 1})" "\n"
                                << R"({"id": "c", "context": "a"})" "\n";
  auto r = linnet_run(args(d / "in.jsonl", d / "out.jsonl"));
  EXPECT_EQ(r.exit_code, 1);
  for (const char* want : {"in.jsonl:2: malformed JSON", "in.jsonl:3: give \"text\"", "in.jsonl:4: \"text\" must be a non-empty string",
                           "in.jsonl:5: `continuation_tokens[0]` = 5000 is not a token id in [0, Vocab=1398)",
                           "in.jsonl:6: unknown key 'label'", "in.jsonl:7: \"context\" needs \"continuation\""})
    EXPECT_NE(r.errors.find(want), std::string::npos) << want << "\n" << r.errors;
  r = linnet_run(args(d / "in.jsonl", d / "out.jsonl", {"--on-error", "skip"}));
  ASSERT_EQ(r.exit_code, 3) << r.errors;  // some lines ended in an error (docs/cli.md)
  const auto out = results(d / "out.jsonl");
  EXPECT_EQ(out.size(), 7u);  // every line; "not json" has no id of its own: its line number is its id
  EXPECT_TRUE(out.at("k").contains("error"));
  EXPECT_TRUE(out.at("ok").contains("loglikelihood"));
  EXPECT_TRUE(out.at("e").contains("error"));
  EXPECT_NE(out.at("2")["error"].get<std::string>().find("malformed JSON"), std::string::npos);
}

// --resume after a kill: the finished lines stay as they are, the cut-off one and the rest are
// scored again, on one rank and on two replicas; the file equals an uninterrupted run's.
TEST(Eval, ResumeScoresOnlyWhatIsMissing) {
  const fs::path d = fresh_dir("resume");
  ASSERT_EQ(linnet_run(args(kFixture / "rolling.jsonl", d / "full.jsonl")).exit_code, 0);
  std::vector<std::string> full;
  {
    std::ifstream in(d / "full.jsonl");
    for (std::string line; std::getline(in, line);) full.push_back(line);
  }
  ASSERT_EQ(full.size(), 9u);
  for (int np : {0, 2}) {
    SCOPED_TRACE(np);
    {
      std::ofstream o(d / "out.jsonl");
      for (int i = 0; i < 3; ++i) o << full[i] << "\n";
      o << full[3].substr(0, 25);  // as a kill leaves it
    }
    std::vector<std::string> a = args(kFixture / "rolling.jsonl", d / "out.jsonl", {"--resume"});
    if (np) a.insert(a.end(), {"--tp", "1"});
    const auto r = linnet_run(a, 180, np);
    if (r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_NE(r.output.find("6 documents (0 errors, 3 already done)"), std::string::npos) << r.output;  // this run's
    std::vector<json> got, want;
    std::ifstream in(d / "out.jsonl");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("{", 0) == 0 && line.back() == '}') got.push_back(json::parse(line));
    for (const auto& l : full) want.push_back(json::parse(l));
    EXPECT_EQ(got, want);
  }
}

// stories15M (where it can be had): the same scores from one rank and from two, as two
// shards of one replica and as two replicas.
TEST(Eval, Stories15MScoresEqualAcrossRanks) {
  LINNET_NEED_STORIES15M();
  const fs::path ckpt = linnet::testing::stories15m_checkpoint(), d = fresh_dir("stories");
  fs::copy_file(linnet::testing::stories15m_files().dir / "tokenizer.model", ckpt / "tokenizer.model",
                fs::copy_options::skip_existing);
  {
    std::ofstream in(d / "in.jsonl");
    const std::string story = "Once upon a time, there was a little girl named Lily. She loved to play outside. ";
    for (int i = 0; i < 12; ++i) {
      std::string text;
      for (int k = 0; k <= i; ++k) text += story;  // up to ~300 tokens: several windows of 256
      in << json{{"id", "doc" + std::to_string(i)}, {"text", text}}.dump() << "\n";
      in << json{{"id", "mc" + std::to_string(i)}, {"context", story.substr(0, 20 + 4 * i)},
                 {"continuation", {" ball", " dog", " park"}}}.dump() << "\n";
    }
  }
  std::vector<std::string> a = {"eval", "--checkpoint", ckpt.string(), "--data", (d / "in.jsonl").string(),
                                "--backend", "cpu"};
  auto with_out = [&](const std::string& out, std::vector<std::string> more) {
    std::vector<std::string> v = a;
    v.insert(v.end(), {"--output", (d / out).string(), "--overwrite"});
    v.insert(v.end(), more.begin(), more.end());
    return v;
  };
  auto r = linnet_run(with_out("one.jsonl", {}));
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  const auto one = results(d / "one.jsonl");
  ASSERT_EQ(one.size(), 24u);
  for (const char* tp : {"2", "1"}) {
    r = linnet_run(with_out("two.jsonl", {"--tp", tp}), 180, 2);
    if (r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    const auto two = results(d / "two.jsonl");
    ASSERT_EQ(two.size(), one.size());
    for (const auto& [id, want] : one) {
      const json& got = two.at(id);
      const json lw = want["loglikelihood"].is_array() ? want["loglikelihood"] : json::array({want["loglikelihood"]});
      const json lg = got["loglikelihood"].is_array() ? got["loglikelihood"] : json::array({got["loglikelihood"]});
      for (size_t k = 0; k < lw.size(); ++k)
        expect_close(lg[k].get<double>(), lw[k].get<double>(), id + " --tp " + tp);
      EXPECT_EQ(got["tokens"], want["tokens"]) << id;
      if (want.contains("is_greedy")) {
        EXPECT_EQ(got["is_greedy"], want["is_greedy"]) << id;
      }
    }
  }
}
