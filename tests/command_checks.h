// The commands on a small checkpoint, checked the same way for every model kind (the
// families' and the mixtures of experts' tests): `linnet generate` and `linnet eval` agree
// across rank layouts, and `linnet serve` answers as `linnet generate` does.
#pragma once
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model_fixtures.h"
#include "mpi_run.h"

namespace linnet::testing {

// How a command runs: np ranks under mpirun (0: alone) with these extra options.
struct RankLayout {
  int np = 0;
  std::vector<std::string> args;
};

// generate: 9 prompts of mixed lengths, greedy — a prompt alone gives what it gives among the
// others, and every layout gives one rank's tokens. eval (a loglikelihood line and a rolling
// one): every eval layout within 1e-4 relative of one rank.
inline void expect_generate_and_eval_agree(const std::filesystem::path& ckpt, const std::string& tag,
                                           const std::vector<RankLayout>& generate_layouts,
                                           const std::vector<RankLayout>& eval_layouts) {
  using nlohmann::json;
  const std::filesystem::path d = fresh_dir("runs_" + tag);
  const std::string words = "Once upon a time the cat sat on a warm mat while rain fell over quiet hills and far rivers ";
  {
    std::ofstream in(d / "in.jsonl");
    for (int i = 0; i < 9; ++i)
      in << json{{"id", "p" + std::to_string(i)}, {"text", words.substr(0, 5 + (i * 11) % 80)}}.dump() << "\n";
    std::ofstream one(d / "one.jsonl");
    one << json{{"id", "p4"}, {"text", words.substr(0, 5 + (4 * 11) % 80)}}.dump() << "\n";
    std::ofstream ev(d / "eval.jsonl");
    ev << R"({"id": "a", "context": "The cat sat on", "continuation": " a warm mat"})" "\n"
       << R"({"id": "b", "text": "Rain fell over quiet hills and far rivers."})" "\n";
  }
  auto run = [&](std::vector<std::string> args, const RankLayout& layout) {
    args.insert(args.end(), {"--checkpoint", ckpt.string(), "--backend", "cpu", "--overwrite", "--max-seq", "64"});
    args.insert(args.end(), layout.args.begin(), layout.args.end());
    return linnet_run(args, 300, layout.np);
  };
  auto gen = [&](const std::filesystem::path& in, const std::filesystem::path& out, const RankLayout& layout) {
    return run({"generate", "--prompts", in.string(), "--output", out.string(), "--max-new-tokens", "10"}, layout);
  };
  auto r = gen(d / "in.jsonl", d / "all.jsonl", {});
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  const auto all = read_jsonl(d / "all.jsonl");
  ASSERT_EQ(all.size(), 9u);
  r = gen(d / "one.jsonl", d / "one_out.jsonl", {});
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(read_jsonl(d / "one_out.jsonl").at(0), all[4]);
  for (const RankLayout& layout : generate_layouts) {
    SCOPED_TRACE(::testing::Message() << "generate on " << layout.np << " ranks " << ::testing::PrintToString(layout.args));
    r = gen(d / "in.jsonl", d / "ranks.jsonl", layout);
    if (r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    const auto got = read_jsonl(d / "ranks.jsonl");
    ASSERT_EQ(got.size(), all.size());
    for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(got[i]["tokens"], all[i]["tokens"]) << "prompt " << i;
  }
  auto ev = [&](const std::filesystem::path& out, const RankLayout& layout) {
    return run({"eval", "--data", (d / "eval.jsonl").string(), "--output", out.string()}, layout);
  };
  r = ev(d / "ev1.jsonl", {});
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  const auto e1 = read_jsonl(d / "ev1.jsonl");
  ASSERT_EQ(e1.size(), 2u);
  for (const RankLayout& layout : eval_layouts) {
    SCOPED_TRACE(::testing::Message() << "eval on " << layout.np << " ranks " << ::testing::PrintToString(layout.args));
    r = ev(d / "evn.jsonl", layout);
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    const auto en = read_jsonl(d / "evn.jsonl");
    ASSERT_EQ(en.size(), 2u);
    for (size_t i = 0; i < 2; ++i)
      for (const char* key : {"loglikelihood", "word_perplexity"})
        if (e1[i].contains(key)) {
          const double a = e1[i][key].get<double>(), b = en[i][key].get<double>();
          EXPECT_NEAR(a, b, 1e-4 * std::abs(a)) << key;
        }
  }
  std::filesystem::remove_all(d);
}

// `linnet serve` in a layout (np ≥ 1 ranks under mpirun): two greedy completions (log-probs
// asked for too) are what `linnet generate` gives the same prompts on one rank, token for
// token, and /health answers 200.
inline void expect_serve_answers_as_generate(const std::filesystem::path& ckpt, const std::string& name,
                                             const RankLayout& layout) {
  using nlohmann::json;
  const std::string mpirun = find_mpirun();
  if (mpirun.empty()) GTEST_SKIP() << "mpirun is not on PATH";
  const std::filesystem::path d = fresh_dir("serve_" + name);
  const std::vector<std::string> prompts = {"Once upon a time the cat sat on a warm mat",
                                            "The cat sat on a warm mat while rain fell"};
  {
    std::ofstream in(d / "in.jsonl");
    for (size_t i = 0; i < prompts.size(); ++i) in << json{{"id", i}, {"text", prompts[i]}}.dump() << "\n";
  }
  auto g = linnet_run({"generate", "--checkpoint", ckpt.string(), "--prompts", (d / "in.jsonl").string(), "--output",
                       (d / "out.jsonl").string(), "--backend", "cpu", "--max-new-tokens", "8", "--max-seq", "64"},
                      120);
  ASSERT_EQ(g.exit_code, 0) << g.errors;
  const auto want = read_jsonl(d / "out.jsonl");
  ASSERT_EQ(want.size(), prompts.size());
  std::vector<std::string> argv = {mpirun, "-np", std::to_string(layout.np), "--oversubscribe", LINNET_BINARY, "serve",
                                   "--checkpoint", ckpt.string(), "--port", "0", "--backend", "cpu", "--max-seq", "64",
                                   "--served-model-name", name};
  argv.insert(argv.end(), layout.args.begin(), layout.args.end());
  BackgroundProcess server(argv);
  const int port = server.serving_port(120);
  ASSERT_GT(port, 0) << server.output;
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const json body = {{"model", name}, {"prompt", prompts[i]}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 1}};
    auto res = cli.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(res) << "no answer: " << httplib::to_string(res.error()) << "\n" << server.output;
    ASSERT_EQ(res->status, 200) << res->body;
    const json r = json::parse(res->body);
    EXPECT_EQ(r["choices"][0]["text"], want[i]["text"]) << "prompt " << i;
    EXPECT_EQ(r["usage"]["completion_tokens"], want[i]["tokens"].size()) << "prompt " << i;
  }
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  std::filesystem::remove_all(d);
}

}  // namespace linnet::testing
