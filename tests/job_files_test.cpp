// What `linnet generate` and `linnet eval` do with their files when things go wrong: a full
// disk (a write that fails is an error naming the file, never a short file and exit 0), a
// non-empty output (refused without --resume or --overwrite), --resume naming every line it
// does not keep, lines that ended in an error (run again; the exit code says so), and input
// that is not JSON Lines.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/stat.h>

#include "runtime/write_checkpoint.h"
#include "model_fixtures.h"
#include "mpi_run.h"

using namespace linnet;
using linnet::testing::linnet_run;
using linnet::testing::run_command;
namespace fs = std::filesystem;
using nlohmann::json;

using linnet::testing::fresh_dir;
using linnet::testing::slurp;
using linnet::testing::tiny_text_model;
using linnet::testing::write_text;

namespace {


std::string prompts(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    const std::string k = std::to_string(i);  // (string literal + temporary trips GCC 12's -Wrestrict)
    s += json{{"id", std::string("p").append(k)}, {"text", std::string("the cat sat number ").append(k)}}.dump();
    s += "\n";
  }
  return s;
}

std::vector<std::string> gen(const fs::path& in, const fs::path& out, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"generate", "--checkpoint", tiny_text_model().string(), "--prompts", in.string(),
                                "--output", out.string(), "--backend", "cpu", "--max-new-tokens", "6"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::vector<std::string> ev(const fs::path& in, const fs::path& out, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"eval", "--checkpoint", tiny_text_model().string(), "--data", in.string(),
                                "--output", out.string(), "--backend", "cpu"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// linnet under a file-size limit (ulimit -f, in KiB): past it a write fails with EFBIG, as on
// a disk that is full (SIGXFSZ ignored, so the write returns the error instead of killing).
linnet::testing::MpiRunResult with_file_limit(int kib, const std::vector<std::string>& args) {
  std::string cmd = "trap '' XFSZ; ulimit -f " + std::to_string(kib) + "; exec '" + std::string(LINNET_BINARY) + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  return run_command({"/bin/bash", "-c", cmd}, 120, true);
}

size_t lines_of(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

}  // namespace

// Before: "0 completions (0 errors)" and exit 0 with /dev/full; 34 of 40 lines and half a line
// with exit 0 on a full disk.
TEST(JobFiles, AFullDiskStopsTheRunNamingTheFileAndResumeCompletesIt) {
  const fs::path d = fresh_dir("full");
  write_text(d / "in.jsonl", prompts(40));
  auto r = linnet_run(gen(d / "in.jsonl", "/dev/full"));
  EXPECT_EQ(r.exit_code, 1) << r.errors;
  EXPECT_NE(r.errors.find("/dev/full: cannot write the output: No space left on device"), std::string::npos) << r.errors;
  ASSERT_EQ(linnet_run(gen(d / "in.jsonl", d / "whole.jsonl")).exit_code, 0);
  const std::string whole = slurp(d / "whole.jsonl");
  ASSERT_EQ(lines_of(whole), 40u);
  ASSERT_GT(whole.size(), 3000u);
  for (const char* command : {"generate", "eval"}) {
    SCOPED_TRACE(command);
    const bool is_gen = std::string(command) == "generate";
    const fs::path out = d / (std::string(command) + ".jsonl"), ref = d / (std::string(command) + "-ref.jsonl");
    if (!is_gen) {
      ASSERT_EQ(linnet_run(ev(d / "in.jsonl", ref)).exit_code, 0);
    }
    const std::string want = is_gen ? whole : slurp(ref);
    // A limit that falls inside a line: the run stops with the file's name and errno's text.
    const int kib = static_cast<int>(want.size() / 2 / 1024);
    r = with_file_limit(kib, is_gen ? gen(d / "in.jsonl", out) : ev(d / "in.jsonl", out));
    EXPECT_EQ(r.exit_code, 1) << r.errors;
    EXPECT_NE(r.errors.find(out.string() + ": cannot write the output: File too large"), std::string::npos) << r.errors;
    EXPECT_NE(r.errors.find("--resume"), std::string::npos) << r.errors;
    const std::string part = slurp(out);
    EXPECT_LT(part.size(), want.size());
    EXPECT_EQ(want.compare(0, part.size(), part), 0) << "what was written is not a prefix of the whole";
    // --resume: the cut-off line is named and dropped, the rest runs; the same file as one run.
    r = linnet_run(is_gen ? gen(d / "in.jsonl", out, {"--resume"}) : ev(d / "in.jsonl", out, {"--resume"}));
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    if (part.back() != '\n') {
      EXPECT_NE(r.errors.find("the last line is incomplete"), std::string::npos) << r.errors;
    }
    EXPECT_EQ(slurp(out), want);
  }
}

TEST(JobFiles, ResultsPrintedToAFullStdoutAreAnError) {
  const auto r = run_command({"/bin/bash", "-c",
                              "exec '" + std::string(LINNET_BINARY) + "' tokenize --checkpoint '" +
                                  tiny_text_model().string() + "' --text 'hello world' > /dev/full"},
                             60, true);
  EXPECT_EQ(r.exit_code, 1) << r.errors;
  EXPECT_NE(r.errors.find("stdout: cannot write the results: No space left on device"), std::string::npos) << r.errors;
}

// Before: an existing output was replaced without a word (4 lines where there were 8).
TEST(JobFiles, ANonEmptyOutputIsRefusedWithoutResumeOrOverwrite) {
  const fs::path d = fresh_dir("refuse");
  write_text(d / "in.jsonl", prompts(4));
  write_text(d / "out.jsonl", "{\"id\": \"earlier\", \"text\": \"kept\"}\n");
  for (const auto& args : {gen(d / "in.jsonl", d / "out.jsonl"), ev(d / "in.jsonl", d / "out.jsonl")}) {
    const auto r = linnet_run(args);
    EXPECT_EQ(r.exit_code, 2) << r.errors;
    EXPECT_NE(r.errors.find("out.jsonl already holds results: give --resume"), std::string::npos) << r.errors;
    EXPECT_NE(r.errors.find("--overwrite"), std::string::npos) << r.errors;
    EXPECT_EQ(slurp(d / "out.jsonl"), "{\"id\": \"earlier\", \"text\": \"kept\"}\n");
  }
  // A part a killed multi-replica run left counts too.
  fs::remove(d / "out.jsonl");
  write_text(d / "out.jsonl.part1", "{\"id\": \"p1\", \"text\": \"x\"}\n");
  auto r = linnet_run(gen(d / "in.jsonl", d / "out.jsonl"));
  EXPECT_EQ(r.exit_code, 2) << r.errors;
  EXPECT_NE(r.errors.find("out.jsonl.part1 already holds results"), std::string::npos) << r.errors;
  r = linnet_run(gen(d / "in.jsonl", d / "out.jsonl", {"--overwrite"}));
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(lines_of(slurp(d / "out.jsonl")), 4u);
  EXPECT_FALSE(fs::exists(d / "out.jsonl.part1"));
  r = linnet_run(gen(d / "in.jsonl", d / "out.jsonl", {"--overwrite", "--resume"}));
  EXPECT_EQ(r.exit_code, 2) << r.errors;
  EXPECT_NE(r.errors.find("--resume and --overwrite exclude each other"), std::string::npos) << r.errors;
}

// Before: --resume dropped unparseable lines and lines of unknown ids without a word, and
// counted an earlier error line as done.
TEST(JobFiles, ResumeNamesWhatItDropsAndRerunsErrorLines) {
  const fs::path d = fresh_dir("resume");
  write_text(d / "in.jsonl", prompts(5));
  ASSERT_EQ(linnet_run(gen(d / "in.jsonl", d / "whole.jsonl")).exit_code, 0);
  std::vector<std::string> whole;
  {
    std::istringstream in(slurp(d / "whole.jsonl"));
    for (std::string l; std::getline(in, l);) whole.push_back(l);
  }
  ASSERT_EQ(whole.size(), 5u);
  const std::string earlier =
      whole[0] + "\n" + "this line is not JSON\n" + R"({"id": "p1", "error": "an earlier failure"})" "\n" + whole[2] +
      "\n" + R"({"id": "gone", "text": "from an older input"})" "\n";
  write_text(d / "out.jsonl", earlier);
  auto r = linnet_run(gen(d / "in.jsonl", d / "out.jsonl", {"--resume"}));
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_NE(r.errors.find("out.jsonl:2: malformed JSON"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("is not a result and is left out"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("out.jsonl:5: id \"gone\" is not an id of the input; the line is kept"), std::string::npos)
      << r.errors;
  EXPECT_NE(r.errors.find("1 line(s) ended in an error; they run again"), std::string::npos) << r.errors;
  EXPECT_NE(r.output.find("3 completions (0 errors, 2 already done)"), std::string::npos) << r.output;
  // Input order, p1's error replaced by its result, the unknown id kept at the end.
  EXPECT_EQ(slurp(d / "out.jsonl"), whole[0] + "\n" + whole[1] + "\n" + whole[2] + "\n" + whole[3] + "\n" + whole[4] +
                                        "\n" + R"({"id": "gone", "text": "from an older input"})" "\n");
  // --resume-keep-errors counts an error line as done.
  write_text(d / "out.jsonl", R"({"id": "p1", "error": "an earlier failure"})" "\n");
  r = linnet_run(gen(d / "in.jsonl", d / "out.jsonl", {"--resume", "--resume-keep-errors"}));
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_NE(r.output.find("4 completions (0 errors, 1 already done)"), std::string::npos) << r.output;
  EXPECT_NE(slurp(d / "out.jsonl").find("an earlier failure"), std::string::npos);
}

// Before: a run whose every line failed printed "0 completions" and exited 0.
TEST(JobFiles, ARunWithErrorLinesExitsThree) {
  const fs::path d = fresh_dir("errors");
  write_text(d / "in.jsonl", R"({"id": "a", "text": "the cat", "max_new_tokens": 100000})" "\n"
                        R"({"id": "b", "text": "the dog", "max_new_tokens": 100000})" "\n");
  auto r = linnet_run(gen(d / "in.jsonl", d / "out.jsonl"));
  EXPECT_EQ(r.exit_code, 3) << r.errors;
  EXPECT_NE(r.output.find("0 completions (2 errors"), std::string::npos) << r.output;
  EXPECT_NE(r.errors.find("2 of the prompts ended in an error"), std::string::npos) << r.errors;
  write_text(d / "docs.jsonl", R"({"id": "ok", "text": "the cat sat"})" "\n" R"({"id": "bad", "context": "x"})" "\n");
  r = linnet_run(ev(d / "docs.jsonl", d / "scores.jsonl", {"--on-error", "skip"}));
  EXPECT_EQ(r.exit_code, 3) << r.errors;
  EXPECT_NE(r.output.find("1 documents (1 errors"), std::string::npos) << r.output;
}

TEST(JobFiles, AJsonArrayIsNamedAsSuch) {
  const fs::path d = fresh_dir("array");
  for (const std::string& text : {std::string(R"([{"text": "a"}, {"text": "b"}])"),
                                 std::string("[\n  {\"text\": \"a\"},\n  {\"text\": \"b\"}\n]\n")}) {
    write_text(d / "in.json", text);
    const auto r = linnet_run(gen(d / "in.json", d / "out.jsonl"));
    EXPECT_EQ(r.exit_code, 1) << r.errors;
    EXPECT_NE(r.errors.find("JSON Lines expected: one JSON object per line; this file is a JSON array"),
              std::string::npos)
        << r.errors;
    EXPECT_EQ(r.errors.find("malformed"), std::string::npos) << r.errors;
  }
}

// --add-bos overrides what transformers would decide for the checkpoint's tokenizer.
TEST(JobFiles, AddBosYesAndNo) {
  const fs::path d = fresh_dir("add_bos");
  write_text(d / "in.jsonl", R"({"id": "a", "text": "the cat sat"})" "\n");
  auto tokens_with = [&](const std::string& v) {
    const auto r = linnet_run(gen(d / "in.jsonl", d / ("out-" + v + ".jsonl"), {"--add-bos", v}));
    EXPECT_EQ(r.exit_code, 0) << r.errors;
    return json::parse(slurp(d / ("out-" + v + ".jsonl")))["prompt_tokens"].get<int>();
  };
  EXPECT_EQ(tokens_with("yes"), tokens_with("no") + 1);
  const auto r = linnet_run(gen(d / "in.jsonl", d / "x.jsonl", {"--add-bos", "maybe"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.errors.find("--add-bos 'maybe': expected auto, yes or no"), std::string::npos) << r.errors;
}

namespace {
// A shell line running linnet with `args`, each quoted.
std::string shell_line(const std::vector<std::string>& args) {
  std::string cmd = "set -o pipefail; '" + std::string(LINNET_BINARY) + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  return cmd;
}
std::string batch_lines(int n) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += json{{"custom_id", std::string("r").append(std::to_string(i))}, {"method", "POST"}, {"url", "/v1/completions"},
              {"body", {{"prompt", "the cat sat"}, {"max_tokens", 3}, {"temperature", 0}}}}.dump() + "\n";
  return s;
}
std::vector<std::string> batch(const fs::path& in, const fs::path& out, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"run-batch", "--checkpoint", tiny_text_model().string(), "-i", in.string(), "-o",
                                out.string(), "--backend", "cpu"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// The three job commands, each with its input written into d: generate and eval 5 lines,
// run-batch 3.
struct JobCase {
  const char* name;
  std::vector<std::string> (*args)(const fs::path&, const fs::path&, std::vector<std::string>);
  fs::path in;
  size_t lines;
};
std::vector<JobCase> job_cases(const fs::path& d) {
  write_text(d / "in.jsonl", prompts(5));
  write_text(d / "batch.jsonl", batch_lines(3));
  return {{"generate", gen, d / "in.jsonl", 5}, {"eval", ev, d / "in.jsonl", 5}, {"run-batch", batch, d / "batch.jsonl", 3}};
}
}  // namespace

// issue 34 item 9. Before: `-o /dev/stdout | cat` hung forever (the results were read back from
// the pipe the process itself held open), a FIFO too. Now a non-regular output is a stream:
// every result line goes through it, the summary goes to stderr when the output is stdout, and
// --resume from a stream is refused.
TEST(JobFiles, OutputToAPipeOrFifoIsWrittenAsAStream) {
  const fs::path d = fresh_dir("stream");
  for (const JobCase& c : job_cases(d)) {
    SCOPED_TRACE(c.name);
    // stdout, a pipe: `| cat > piped.jsonl`.
    const fs::path piped = d / (std::string(c.name) + "-piped.jsonl");
    auto r = run_command({"/bin/bash", "-c", shell_line(c.args(c.in, "/dev/stdout", {})) + " | cat > '" + piped.string() + "'"},
                         60, true);
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    const auto lines = linnet::testing::read_jsonl(piped);  // every line a JSON result: no summary among them
    EXPECT_EQ(lines.size(), c.lines);
    EXPECT_NE(r.errors.find(std::string(c.name) + ": "), std::string::npos) << "the summary goes to stderr: " << r.errors;
    // A FIFO with a reader.
    const fs::path fifo = d / (std::string(c.name) + ".fifo"), read = d / (std::string(c.name) + "-fifo.jsonl");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    r = run_command({"/bin/bash", "-c", "cat '" + fifo.string() + "' > '" + read.string() + "' & " +
                                            shell_line(c.args(c.in, fifo, {})) + "; s=$?; wait; exit $s"},
                    60, true);
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_EQ(linnet::testing::read_jsonl(read).size(), c.lines);
    EXPECT_NE(r.output.find(std::string(c.name) + ": "), std::string::npos) << "the summary on stdout: " << r.output;
    // --resume reads the output back: refused on a stream, by name.
    r = run_command({"/bin/bash", "-c", shell_line(c.args(c.in, "/dev/stdout", {"--resume"})) + " | cat"}, 60, true);
    EXPECT_EQ(r.exit_code, 1) << r.errors;
    EXPECT_NE(r.errors.find("--output is not a regular file"), std::string::npos) << r.errors;
  }
}

// issue 35: `--output -` wrote a file named `-`. Now "-" is stdout for --output/-o (written as
// a stream, the summary on stderr) and stdin for --prompts/--data/-i, under mpirun too (world
// rank 0 reads it and hands it on: mpirun gives stdin to rank 0 alone).
TEST(JobFiles, DashIsStdoutForOutputsAndStdinForInputs) {
  const fs::path d = fresh_dir("dash");
  for (const JobCase& c : job_cases(d)) {
    SCOPED_TRACE(c.name);
    // Both ends: `linnet … < in - > out -`, run in d, where a file named "-" would appear.
    const fs::path piped = d / (std::string(c.name) + "-dash.jsonl"), file = d / (std::string(c.name) + "-file.jsonl");
    auto r = run_command({"/bin/bash", "-c", "cd '" + d.string() + "' && " + shell_line(c.args("-", "-", {})) + " < '" +
                                                 c.in.string() + "' | cat > '" + piped.string() + "'"},
                         60, true);
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_FALSE(fs::exists(d / "-")) << "a file named '-' was written";
    const auto lines = linnet::testing::read_jsonl(piped);  // results only: the summary went to stderr
    EXPECT_EQ(lines.size(), c.lines);
    EXPECT_NE(r.errors.find(std::string(c.name) + ": "), std::string::npos) << "the summary goes to stderr: " << r.errors;
    // The same lines as a file run gives.
    r = linnet_run(c.args(c.in, file, {}));
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    if (std::string(c.name) != "run-batch") EXPECT_EQ(slurp(piped), slurp(file));  // run-batch's lines hold a time
    else EXPECT_EQ(linnet::testing::read_jsonl(file).size(), c.lines);
    // --resume needs a file it can read back.
    r = run_command({"/bin/bash", "-c", shell_line(c.args(c.in, "-", {"--resume"})) + " | cat"}, 60, true);
    EXPECT_EQ(r.exit_code, 1) << r.errors;
    EXPECT_NE(r.errors.find("--output - (stdout) is not a regular file"), std::string::npos) << r.errors;
  }
  // Under mpirun, two shards: stdin reaches rank 0 only; the lines are the same.
  if (linnet::testing::find_mpirun().empty()) GTEST_SKIP() << "mpirun not found";
  const fs::path two = d / "two.jsonl";
  std::string cmd = "'";  // (a literal + a temporary trips GCC 12's -Wrestrict)
  cmd += linnet::testing::find_mpirun() + "' -np 2 --oversubscribe '" + std::string(LINNET_BINARY) + "'";
  for (const auto& a : gen("-", two, {"--tp", "2"})) cmd += " '" + a + "'";
  auto r = run_command({"/bin/bash", "-c", cmd + " < '" + (d / "in.jsonl").string() + "'"}, 120, true);
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(slurp(two), slurp(d / "generate-file.jsonl"));
}

// issue 35: under mpirun, a run that ends with some error lines (exit 3) had every shard repeat
// each line's warning. Now each is logged once (by the rank that writes the line), rank 0 says
// "exit code 3" once, every rank finalizes, and mpirun exits 3. (OpenMPI 4's own notice for a
// non-zero exit stays: docs/cli.md, Exit codes.)
TEST(JobFiles, ErrorLinesUnderMpirunAreReportedOnce) {
  if (linnet::testing::find_mpirun().empty()) GTEST_SKIP() << "mpirun not found";
  const fs::path d = fresh_dir("mpi_exit3");
  write_text(d / "in.jsonl", prompts(4) + R"({"id": "long", "text": "the cat", "max_new_tokens": 100000})" "\n" +
                                 "not json\n");
  write_text(d / "batch.jsonl", batch_lines(3) + R"({"custom_id": "bad", "method": "GET", "url": "/v1/completions", "body": {}})" "\n");
  const auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  for (const char* tp : {"2", "1"}) {  // two shards of one replica, two replicas
    SCOPED_TRACE(std::string("--tp ") + tp);
    auto r = linnet_run(gen(d / "in.jsonl", d / "out.jsonl", {"--tp", tp, "--overwrite", "--on-error", "skip"}), 120, 2);
    EXPECT_EQ(r.exit_code, 3) << r.errors;
    EXPECT_EQ(count(r.errors, "exceeds MaxSeq"), 1u) << r.errors;
    EXPECT_EQ(count(r.errors, "malformed JSON"), 1u) << r.errors;
    EXPECT_EQ(count(r.errors, "exit code 3"), 1u) << r.errors;
    EXPECT_EQ(linnet::testing::read_jsonl(d / "out.jsonl").size(), 6u);
    r = linnet_run(batch(d / "batch.jsonl", d / "batch-out.jsonl", {"--tp", tp, "--overwrite"}), 120, 2);
    EXPECT_EQ(r.exit_code, 3) << r.errors;
    EXPECT_EQ(count(r.errors, "\"method\" must be"), 1u) << r.errors;
    EXPECT_EQ(count(r.errors, "exit code 3"), 1u) << r.errors;
    EXPECT_EQ(linnet::testing::read_jsonl(d / "batch-out.jsonl").size(), 4u);
  }
}

// issue 34 item 10. Before: `run-batch --resume` with the input as its output took the requests
// for answers and exited 0 having done nothing; --overwrite would have truncated the input.
TEST(JobFiles, AnOutputThatIsTheInputIsRefused) {
  const fs::path d = fresh_dir("same");
  write_text(d / "batch.jsonl", batch_lines(3));
  write_text(d / "in.jsonl", prompts(3));
  fs::create_symlink(d / "in.jsonl", d / "link.jsonl");
  const std::string batch_before = slurp(d / "batch.jsonl"), in_before = slurp(d / "in.jsonl");
  const std::vector<std::vector<std::string>> runs = {
      batch(d / "batch.jsonl", d / "batch.jsonl", {"--resume"}), batch(d / "batch.jsonl", d / "batch.jsonl", {"--overwrite"}),
      gen(d / "in.jsonl", d / "in.jsonl", {"--resume"}), gen(d / "in.jsonl", d / "link.jsonl", {"--overwrite"}),
      ev(d / "link.jsonl", d / "in.jsonl", {"--resume"})};
  for (const auto& args : runs) {
    SCOPED_TRACE(args[0] + " " + args.back());
    const auto r = linnet_run(args);
    EXPECT_EQ(r.exit_code, 2) << r.errors;  // a usage error
    EXPECT_NE(r.errors.find("the output is the input file"), std::string::npos) << r.errors;
  }
  EXPECT_EQ(slurp(d / "batch.jsonl"), batch_before);
  EXPECT_EQ(slurp(d / "in.jsonl"), in_before);
}
