// The progress of `linnet generate`, `eval` and `run-batch` (issue 35, item 4): requests
// finished and tokens made counted as they happen, a log line every --progress-interval
// seconds when stderr is not a terminal (SLURM, nohup), a bar rewritten in place on a
// terminal, world rank 0 only, nothing with --quiet.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "model_fixtures.h"
#include "mpi_run.h"

using namespace linnet;
using linnet::testing::fresh_dir;
using linnet::testing::linnet_run;
using linnet::testing::run_command;
using linnet::testing::write_text;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using linnet::testing::small_text_model;

std::string text(int i) { return "the cat sat on the mat number " + std::to_string(i); }

// A progress line's counts: "<what>: 3/16 prompts done · 412 tokens · …".
struct Counts {
  long done = 0, total = 0, tokens = 0;
};

std::vector<Counts> progress_lines(const std::string& log, const std::string& what, const std::string& unit) {
  std::vector<Counts> out;
  const std::regex line("\\[info\\] " + what + ": (\\d+)/(\\d+) " + unit + " done · (\\d+) tokens · \\d+ tok/s · ETA [0-9:?]+");
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it)
    out.push_back({std::stol((*it)[1]), std::stol((*it)[2]), std::stol((*it)[3])});
  return out;
}

// Lines came during the run: several, counts never falling, tokens rising, some before the end.
void expect_rising(const std::vector<Counts>& lines, long total, const std::string& log) {
  ASSERT_GE(lines.size(), 3u) << log;
  long during = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].total, total) << log;
    if (lines[i].done < total) ++during;
    if (i == 0) continue;
    EXPECT_GE(lines[i].done, lines[i - 1].done) << log;
    EXPECT_GE(lines[i].tokens, lines[i - 1].tokens) << log;
  }
  EXPECT_GT(lines.back().tokens, lines.front().tokens) << log;
  EXPECT_GT(lines.back().done, lines.front().done) << log;
  EXPECT_GE(during, 2) << log;
}

std::vector<std::string> generate_args(const fs::path& d, std::vector<std::string> more = {}, int count = 16) {
  std::string prompts;
  for (int i = 0; i < count; ++i) prompts += json{{"id", i}, {"text", text(i)}}.dump() + "\n";
  write_text(d / "in.jsonl", prompts);
  std::vector<std::string> a = {"generate", "--checkpoint", small_text_model().string(), "--prompts", (d / "in.jsonl").string(),
                                "--output", (d / "out.jsonl").string(), "--backend", "cpu", "--max-new-tokens", "100",
                                "--ignore-eos", "--max-rows", "1", "--overwrite"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

}  // namespace

// Before: no line at all when stderr was not a terminal (and no --progress-interval).
TEST(Progress, GenerateLogsLinesWhileItRuns) {
  const fs::path d = fresh_dir("generate");
  const auto r = linnet_run(generate_args(d, {"--progress-interval", "0.1"}), 300);
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  expect_rising(progress_lines(r.errors, "generate", "prompts"), 16, r.errors);
  // Nothing of a terminal's bar in a log.
  EXPECT_EQ(r.errors.find('\r'), std::string::npos);
  fs::remove_all(d);
}

TEST(Progress, EvalLogsLinesWhileItRuns) {
  const fs::path d = fresh_dir("eval");
  std::string docs;
  for (int i = 0; i < 48; ++i) {
    std::string t;
    for (int k = 0; k < 12; ++k) t += text(i * 12 + k) + ". ";
    docs += json{{"id", i}, {"text", t}}.dump() + "\n";
  }
  write_text(d / "in.jsonl", docs);
  const auto r = linnet_run({"eval", "--checkpoint", small_text_model().string(), "--data", (d / "in.jsonl").string(),
                             "--output", (d / "out.jsonl").string(), "--backend", "cpu", "--max-length", "32",
                             "--max-batch-tokens", "32", "--threads", "1", "--progress-interval", "0.1"},
                            300);
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  expect_rising(progress_lines(r.errors, "eval", "documents"), 48, r.errors);
  fs::remove_all(d);
}

TEST(Progress, RunBatchLogsLinesWhileItRuns) {
  const fs::path d = fresh_dir("run_batch");
  std::string requests;
  for (int i = 0; i < 16; ++i)
    requests += json{{"custom_id", "r" + std::to_string(i)},
                     {"method", "POST"},
                     {"url", "/v1/completions"},
                     {"body", {{"prompt", text(i)}, {"max_tokens", 100}, {"ignore_eos", true}, {"temperature", 0}}}}
                    .dump() +
                "\n";
  write_text(d / "in.jsonl", requests);
  const auto r = linnet_run({"run-batch", "--checkpoint", small_text_model().string(), "-i", (d / "in.jsonl").string(), "-o",
                             (d / "out.jsonl").string(), "--backend", "cpu", "--max-rows", "1", "--progress-interval",
                             "0.1"},
                            300);
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  expect_rising(progress_lines(r.errors, "run-batch", "requests"), 16, r.errors);
  fs::remove_all(d);
}

// --progress-interval 0 and --quiet: no lines.
TEST(Progress, IntervalZeroAndQuietLogNone) {
  const fs::path d = fresh_dir("none");
  for (const char* flag : {"--quiet", "--progress-interval=0"}) {
    auto args = generate_args(d, {flag});
    if (std::string(flag) == "--quiet") args.insert(args.end(), {"--progress-interval", "0.1"});
    const auto r = linnet_run(args, 300);
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_EQ(r.errors.find("prompts done"), std::string::npos) << flag << "\n" << r.errors;
  }
  fs::remove_all(d);
}

// On a terminal (a pty from script(1)): a bar rewritten in place, its counts rising, full at the end.
TEST(Progress, TerminalShowsABar) {
  if (run_command({"/bin/sh", "-c", "command -v script"}).exit_code != 0) GTEST_SKIP() << "script (util-linux) not found";
  const fs::path d = fresh_dir("terminal");
  std::string cmd = "exec '" + std::string(LINNET_BINARY) + "'";
  for (const auto& a : generate_args(d, {}, 64)) cmd += " '" + a + "'";  // ~1.3 s: several redraws, 5 a second
  const auto r = run_command({"/usr/bin/env", "script", "-q", "-e", "-c", cmd, "/dev/null"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<Counts> bars;
  const std::regex bar("\rgenerate \\[[#.]{24}\\] (\\d+)/(\\d+) prompts done · (\\d+) tokens");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), bar), end; it != end; ++it)
    bars.push_back({std::stol((*it)[1]), std::stol((*it)[2]), std::stol((*it)[3])});
  ASSERT_GE(bars.size(), 3u) << r.output;
  EXPECT_LT(bars.front().tokens, bars.back().tokens);
  EXPECT_EQ(bars.back().done, 64);
  EXPECT_EQ(bars.back().tokens, 6400);
  EXPECT_NE(r.output.find("\rgenerate [########################] 64/64 prompts done"), std::string::npos) << r.output;
  EXPECT_EQ(progress_lines(r.output, "generate", "prompts").size(), 0u) << "log lines on a terminal";
  fs::remove_all(d);
}
