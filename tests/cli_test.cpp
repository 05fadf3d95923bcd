// The `linnet` command as a user meets it: numbers that must fit, sizes that must fit memory,
// hostile files that must be refused by name (never a crash or a hang), usage errors (exit 2),
// logs on stderr and results on stdout, and checks that come before the model loads.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "architectures/hf_config.h"
#include "runtime/write_checkpoint.h"
#include "model_fixtures.h"
#include "mpi_run.h"

using namespace linnet;
using linnet::testing::MpiRunResult;
namespace fs = std::filesystem;
using nlohmann::json;

using linnet::testing::fresh_dir;
using linnet::testing::write_text;

namespace {

// linnet with args, stdout and stderr apart, killed after `timeout` (a hang fails the test).
MpiRunResult run_linnet(std::vector<std::string> args, double timeout = 60) {
  return linnet::testing::linnet_run(std::move(args), timeout);
}

// A tiny random checkpoint (vocab 97, 2 layers, max_position 64), made once per build.
fs::path tiny() {
  return linnet::testing::shared_checkpoint("linnet_cli_tiny", [](const std::string& d) {
    write_random_checkpoint(linnet::testing::tiny_config(), d, DType::f32, 5);
  });
}

// A directory with the tiny model's config.json and no weights: an error from a run on it
// that is not about the weights came before they were looked for.
fs::path weightless(const std::string& name, const json& overrides = json::object()) {
  const fs::path d = fresh_dir(name);
  json c = json::parse(std::ifstream(tiny() / "config.json"));
  c.update(overrides);
  write_text(d / "config.json", c.dump());
  return d;
}

std::vector<std::string> run_args(const fs::path& ckpt, const fs::path& calls, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"run", "--checkpoint", ckpt.string(), "--calls", calls.string(), "--backend", "cpu"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::string deep(const std::string& open, const std::string& inner, const std::string& close, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += open;
  s += inner;
  for (int i = 0; i < n; ++i) s += close;
  return s;
}

#define EXPECT_ERROR(r, code, text)                                                               \
  do {                                                                                            \
    EXPECT_FALSE((r).timed_out);                                                                  \
    EXPECT_EQ((r).exit_code, code) << (r).errors;                                                 \
    EXPECT_NE((r).errors.find(text), std::string::npos) << "wanted: " << (text) << "\n" << (r).errors; \
  } while (0)

}  // namespace

// ---- numbers -------------------------------------------------------------------------------

TEST(Cli, InlineValuesMustFitTheirArgumentsDtype) {
  const fs::path d = weightless("inline");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"entry": "decode", "args": {"token": [[4294967297]], "pos": 0}})",
       "call 0 (decode): token[0, 0] = 4294967297 does not fit i32"},
      {R"({"entry": "decode", "args": {"token": [[1]], "pos": 4294967296}})", "call 0 (decode): pos = 4294967296 does not fit i32"},
      {R"({"entry": "generate_until", "args": {"token": [[1]], "pos": 0, "eos": 4294967298}, "generics": {"MaxNew": 2}})",
       "eos = 4294967298 does not fit i32"},
      {R"({"entry": "decode", "args": {"token": [[1]], "pos": 1.7}})", "pos = 1.7 is not an integer"},
      {R"({"entry": "decode", "args": {"token": [[1]], "pos": 1e19}})", "pos = 1e+19 is not an integer"},
      {R"({"entry": "sample", "args": {"token": [[1]], "pos": 0, "key": [1, 2], "temperature": 1e300}, "generics": {"Steps": 1}})",
       "temperature = 1e+300 is not a finite f32 value"},
      {R"({"entry": "sample", "args": {"token": [[1]], "pos": 0, "key": [1, 18446744073709551615], "temperature": 1}, "generics": {"Steps": 1}})",
       "key[1] = 18446744073709551615 does not fit i64"},
      {R"({"entry": "forward", "args": {"tokens": [[1, "two"]]}})", "tokens[0, 1] = \"two\": expected a number"},
      {R"({"entry": "forward", "args": {"tokens": [1, 2]}})", "expected a rank-2 array"},
      {R"({"entry": "generate", "args": {"token": [[1]], "pos": 0}, "generics": {"Steps": 4294967297}})",
       "generic Steps = 4294967297 must be an integer in [1, 2147483647]"},
  };
  for (const auto& [call, want] : cases) {
    SCOPED_TRACE(call);
    write_text(d / "calls.json", "[" + call + "]");
    const auto r = run_linnet(run_args(d, d / "calls.json", {"--batch", "1"}));
    EXPECT_ERROR(r, 1, want);
  }
}

namespace {
// A CPU switch set to `value` for one `linnet bench`: refused by name when the backend is made.
void expect_cpu_switch_refused(const char* var, const char* value, const std::string& want) {
  setenv(var, value, 1);
  const auto r = run_linnet({"bench", "--checkpoint", tiny().string(), "--backend", "cpu", "--prompt", "2", "--gen",
                             "1", "--warmup", "0", "--repeats", "1"});
  unsetenv(var);
  EXPECT_ERROR(r, 1, want);
}
}  // namespace

// LINNET_CPU_DOT: a value not listed is refused by name when the CPU backend is made.
TEST(Cli, CpuDotSwitchIsCheckedByName) {
  expect_cpu_switch_refused("LINNET_CPU_DOT", "bf32", "LINNET_CPU_DOT=bf32: expected f32, bf16 or int8");
}

// LINNET_CPU_PREFETCH likewise: only 1 and 0.
TEST(Cli, CpuPrefetchSwitchIsCheckedByName) {
  expect_cpu_switch_refused("LINNET_CPU_PREFETCH", "off", "LINNET_CPU_PREFETCH=off: expected 1 or 0");
}

TEST(Cli, DetokenizeRangeChecksIds) {
  const fs::path tok = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/tokenizers/hf_bytelevel";
  auto r = run_linnet({"detokenize", "--checkpoint", tok.string(), "--ids", "4294967396"});
  EXPECT_ERROR(r, 1, "--ids[0]: token id 4294967396 is outside [0, vocab size=");
  r = run_linnet({"detokenize", "--checkpoint", tok.string(), "--ids", "5 -1"});
  EXPECT_ERROR(r, 1, "--ids[1]: token id -1 is outside");
  r = run_linnet({"detokenize", "--checkpoint", tok.string(), "--ids", "99999999999999999999"});
  EXPECT_ERROR(r, 1, "'99999999999999999999' is not a token id");
  const fs::path d = fresh_dir("detok");
  write_text(d / "ids.jsonl", "[1, 2]\n[3, 4294967396]\n");
  r = run_linnet({"detokenize", "--checkpoint", tok.string(), "--jsonl", (d / "ids.jsonl").string()});
  EXPECT_ERROR(r, 1, "ids.jsonl:2: [1]: token id 4294967396 is outside");
  r = run_linnet({"detokenize", "--checkpoint", tok.string(), "--ids", "72 105"});
  EXPECT_EQ(r.exit_code, 0) << r.errors;
}

TEST(Cli, SizesAreCheckedForOverflowAndAgainstMemory) {
  const fs::path d = weightless("sizes");
  auto r = run_linnet({"inspect", "--checkpoint", d.string(), "--batch", "4611686018427387904"});
  EXPECT_ERROR(r, 1, "Batch=4611686018427387904 × MaxSeq=64 cache slots exceed the i32 slot range");
  write_text(d / "calls.json", R"([{"entry": "forward", "args": {"tokens": [[1, 2]]}}])");
  // 2 layers × 2 KV heads × head dim 8 × f32 × 2 (K, V) = 256 bytes a slot: 420 GB of cache.
  r = run_linnet(run_args(d, d / "calls.json", {"--batch", "200000", "--max-seq", "8192"}));
  EXPECT_ERROR(r, 1, "this rank needs");
  EXPECT_NE(r.errors.find("the largest --batch that fits at --max-seq 8192 is"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("the largest --max-seq that fits at --batch 200000 is"), std::string::npos) << r.errors;
  // The default MaxSeq (max_position_embeddings) that does not fit names --max-seq, before
  // the weights are looked for (this directory has none).
  const fs::path big = weightless("sizes_default", {{"max_position_embeddings", 1 << 20}, {"hidden_size", 4096},
                                                    {"num_attention_heads", 32}, {"num_key_value_heads", 8}});
  write_text(big / "calls.json", R"([{"entry": "forward", "args": {"tokens": [[1, 2]]}}])");
  r = run_linnet(run_args(big, big / "calls.json", {"--batch", "64"}));
  EXPECT_ERROR(r, 1, "MaxSeq defaults to max_position_embeddings (1048576): pass --max-seq to lower it");
  for (const auto& [opt, value] : std::vector<std::pair<std::string, std::string>>{
           {"--repeats", "0"}, {"--gen", "-5"}, {"--prompt", "0"}}) {
    r = run_linnet({"bench", "--config", "tiny", "--random-weights", "--backend", "cpu", opt, value});
    EXPECT_ERROR(r, 2, opt + (value[0] == '-' ? " must be 0 or more, got " : " must be at least 1, got ") + value);
  }
  // A --gen that would wrap the positions it needs, and a --json report that cannot be
  // written: refused before anything runs.
  r = run_linnet({"bench", "--config", "tiny", "--random-weights", "--backend", "cpu", "--gen", "4611686018427387904"});
  EXPECT_ERROR(r, 2, "runs are more positions than a sequence can hold");
  r = run_linnet({"bench", "--config", "tiny", "--random-weights", "--backend", "cpu", "--json", "/nonexistent-dir/r.json"});
  EXPECT_ERROR(r, 1, "/nonexistent-dir/r.json: cannot write --json: directory /nonexistent-dir does not exist");
  {  // bench-engine: checked before it looks for the checkpoint
    r = run_linnet({"bench-engine", "--checkpoint", "/nonexistent", "--backend", "cpu", "--json", "/nonexistent-dir/r.json"});
    EXPECT_ERROR(r, 1, "/nonexistent-dir/r.json: cannot write --json: directory /nonexistent-dir does not exist");
  }
}

// ---- hostile files -------------------------------------------------------------------------

TEST(Cli, DeepJsonIsRefusedByNameEverywhere) {
  const fs::path d = fresh_dir("deep");
  fs::copy(tiny(), d / "ckpt");
  write_text(d / "calls.json", "[{\"entry\": \"forward\", \"args\": {\"tokens\": " + deep("[", "", "]", 60000) + "}}]");
  auto r = run_linnet(run_args(d / "ckpt", d / "calls.json"));
  EXPECT_ERROR(r, 1, "calls.json: JSON nested deeper than 64 levels");
  write_text(d / "ckpt/generation_config.json", deep("{\"eos_token_id\": ", "1", "}", 100000));
  r = run_linnet({"inspect", "--checkpoint", (d / "ckpt").string()});
  EXPECT_ERROR(r, 1, "generation_config.json: JSON nested deeper than 64 levels");
  fs::remove(d / "ckpt/generation_config.json");
  fs::create_directories(d / "bad");
  write_text(d / "bad/config.json", deep("{\"vocab_size\": ", "1", "}", 100000));
  r = run_linnet({"inspect", "--checkpoint", (d / "bad").string()});
  EXPECT_ERROR(r, 1, "bad/config.json: JSON nested deeper than 64 levels");
  // A sharded checkpoint's index.
  fs::rename(d / "ckpt/model.safetensors", d / "ckpt/model-00001-of-00001.safetensors");
  write_text(d / "ckpt/model.safetensors.index.json", deep("{\"weight_map\": ", "{}", "}", 100000));
  write_text(d / "calls.json", R"([{"entry": "forward", "args": {"tokens": [[1]]}}])");
  r = run_linnet(run_args(d / "ckpt", d / "calls.json"));
  EXPECT_ERROR(r, 1, "model.safetensors.index.json: JSON nested deeper than 64 levels");
  // tokenizer.json, and a --jsonl line.
  fs::create_directories(d / "tok");
  write_text(d / "tok/tokenizer.json", deep("{\"model\": ", "{}", "}", 100000));
  r = run_linnet({"tokenize", "--checkpoint", (d / "tok").string(), "--text", "hi"});
  EXPECT_ERROR(r, 1, "tokenizer.json: JSON nested deeper than 64 levels");
  const fs::path tok = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/tokenizers/hf_bytelevel";
  write_text(d / "texts.jsonl", "\"fine\"\n" + deep("[", "\"x\"", "]", 70000) + "\n");
  r = run_linnet({"tokenize", "--checkpoint", tok.string(), "--jsonl", (d / "texts.jsonl").string()});
  EXPECT_ERROR(r, 1, "texts.jsonl:2: JSON nested deeper than 64 levels");
}

TEST(Cli, NonRegularFilesAreRefusedByName) {
  const fs::path d = fresh_dir("special");
  write_text(d / "calls.json", R"([{"entry": "forward", "args": {"tokens": [[1, 2]]}}])");
  // A FIFO as the weights: open() would wait for a writer forever.
  fs::create_directories(d / "fifo");
  fs::copy_file(tiny() / "config.json", d / "fifo/config.json");
  ASSERT_EQ(::mkfifo((d / "fifo/model.safetensors").c_str(), 0600), 0);
  auto r = run_linnet(run_args(d / "fifo", d / "calls.json"), 20);
  EXPECT_ERROR(r, 1, "fifo/model.safetensors: not a regular file (a FIFO)");
  // A FIFO as config.json and as the calls file.
  fs::create_directories(d / "fifo_config");
  ASSERT_EQ(::mkfifo((d / "fifo_config/config.json").c_str(), 0600), 0);
  r = run_linnet({"inspect", "--checkpoint", (d / "fifo_config").string()}, 20);
  EXPECT_ERROR(r, 1, "fifo_config/config.json: config is a FIFO, not a regular file");
  ASSERT_EQ(::mkfifo((d / "calls.fifo").c_str(), 0600), 0);
  r = run_linnet(run_args(tiny(), d / "calls.fifo"), 20);
  EXPECT_ERROR(r, 1, "calls.fifo: calls file is a FIFO, not a regular file");
  // A directory as config.json and as --calls.
  fs::create_directories(d / "dir_config/config.json");
  r = run_linnet({"inspect", "--checkpoint", (d / "dir_config").string()});
  EXPECT_ERROR(r, 1, "dir_config/config.json: config is a directory, not a regular file");
  r = run_linnet(run_args(tiny(), d));
  EXPECT_ERROR(r, 1, ": calls file is a directory, not a regular file");
  // A symlink loop as the weights.
  fs::create_directories(d / "loop");
  fs::copy_file(tiny() / "config.json", d / "loop/config.json");
  fs::create_symlink("model.safetensors", d / "loop/model.safetensors");
  r = run_linnet(run_args(d / "loop", d / "calls.json"));
  EXPECT_ERROR(r, 1, "loop/model.safetensors: cannot open: Too many levels of symbolic links");
  // Tokenizer files: a FIFO or directory there is refused by name, not passed over for the
  // next kind (which said "holds no tokenizer.json …").
  fs::create_directories(d / "tok_fifo");
  ASSERT_EQ(::mkfifo((d / "tok_fifo/tokenizer.json").c_str(), 0600), 0);
  r = run_linnet({"tokenize", "--checkpoint", (d / "tok_fifo").string(), "--text", "hi"}, 20);
  EXPECT_ERROR(r, 1, "tok_fifo/tokenizer.json: tokenizer is a FIFO, not a regular file");
  fs::create_directories(d / "tok_dir/tokenizer.model");
  r = run_linnet({"tokenize", "--checkpoint", (d / "tok_dir").string(), "--text", "hi"}, 20);
  EXPECT_ERROR(r, 1, "tok_dir/tokenizer.model: tokenizer is a directory, not a regular file");
}

TEST(Cli, UnusedTensorsAreNamedOnce) {
  const fs::path d = fresh_dir("unused");
  fs::copy(tiny(), d / "ckpt");
  json c = json::parse(std::ifstream(d / "ckpt/config.json"));
  c["num_hidden_layers"] = 1;  // the files hold 2
  write_text(d / "ckpt/config.json", c.dump());
  write_text(d / "calls.json", R"([{"entry": "forward", "args": {"tokens": [[1, 2]]}}])");
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = 0; (at = s.find(what, at)) != std::string::npos; ++at) ++n;
    return n;
  };
  const std::string warning = "9 tensor(s) in the checkpoint are not used by the model (num_hidden_layers = 1): "
                              "model.layers.1.";
  auto r = run_linnet(run_args(d / "ckpt", d / "calls.json"));
  EXPECT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(count(r.errors, warning), 1u) << r.errors;
  const auto m = linnet::testing::mpi_run(2, LINNET_BINARY, run_args(d / "ckpt", d / "calls.json"), 60, true);
  if (m.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << m.output;
  EXPECT_EQ(m.exit_code, 0) << m.errors;
  EXPECT_EQ(count(m.errors, warning), 1u) << m.errors;  // shard 0 only
}

// ---- command-line conventions --------------------------------------------------------------

TEST(Cli, UsageErrorsExitTwo) {
  const fs::path d = fresh_dir("usage");
  write_text(d / "calls.json", R"([{"entry": "forward", "args": {"tokens": [[1, 2]]}}])");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"run", "--checkpoint", tiny().string(), "--calls", (d / "calls.json").string(), "--bogus"},
           {"run", "--checkpoint", tiny().string()},
           {"run", "--checkpoint", tiny().string(), "--calls", (d / "calls.json").string(), "--batch", "abc"},
           {"run", "--checkpoint", tiny().string(), "--calls", (d / "calls.json").string(), "--log-level", "loud"},
           {"run", "--checkpoint", tiny().string(), "--calls", (d / "calls.json").string(), "--threads", "-1"},
           {"init", "--out", (d / "x").string()},
           {"tokenize", "--checkpoint", tiny().string()},
           {"nonsense"}}) {
    const auto r = run_linnet(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << (args.size() > 5 ? args[5] : "") << ": " << r.errors;
  }
  // A run-time error is 1.
  const auto r = run_linnet(run_args(fresh_dir("usage_missing"), d / "calls.json"));
  EXPECT_EQ(r.exit_code, 1) << r.errors;
}

TEST(Cli, LogsGoToStderrAndResultsToStdout) {
  const fs::path d = fresh_dir("streams");
  write_text(d / "calls.json", R"([{"entry": "generate", "args": {"token": [[3]], "pos": 0}, "generics": {"Steps": 4},
                               "outputs": ["ids"]}])");
  auto r = run_linnet(run_args(tiny(), d / "calls.json", {"--print", "--max-seq", "64"}));
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(r.output.rfind("ids Tensor[1, 4; i32]\n", 0), 0u) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 2) << r.output;
  EXPECT_NE(r.errors.find("[info] backend cpu"), std::string::npos) << r.errors;
  const std::string printed = r.output;
  r = run_linnet(run_args(tiny(), d / "calls.json", {"--print", "--max-seq", "64", "--quiet"}));
  EXPECT_EQ(r.output, printed);
  EXPECT_EQ(r.errors.find("[info]"), std::string::npos) << r.errors;
  r = run_linnet(run_args(tiny(), d / "calls.json", {"--print", "--max-seq", "64", "--log-level", "debug", "--threads", "1"}));
  EXPECT_EQ(r.output, printed);
  EXPECT_NE(r.errors.find("backend cpu (1 threads: --threads 1)"), std::string::npos) << r.errors;
  // Under mpirun, every rank logging at info: stdout is rank 0's printed outputs alone.
  const auto m = linnet::testing::mpi_run(
      2, LINNET_BINARY, run_args(tiny(), d / "calls.json", {"--print", "--max-seq", "64", "--log-level", "info"}), 60,
      true);
  if (m.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << m.output;
  ASSERT_EQ(m.exit_code, 0) << m.errors;
  EXPECT_EQ(m.output, printed);
  EXPECT_NE(m.errors.find("[rank 1]"), std::string::npos) << m.errors;
}

// Everything that can be checked without the weights is checked before they load: each of
// these runs on a directory without weights and fails on its own fault.
TEST(Cli, CallsAndOutputsAreCheckedBeforeTheModelLoads) {
  const fs::path d = weightless("before_load");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"([{"entry": "fwd", "args": {}}])", "call 0: unknown entry 'fwd'"},
      {R"([{"entry": "generate", "args": {"token": [[1]], "pos": 0}, "generics": {"Steps": 2, "Bogus": 3}}])",
       "unknown generic 'Bogus' (generate's generics: Steps)"},
      {R"([{"entry": "forward", "args": {"tokenz": [[1]]}}])", "no argument 'tokenz'"},
      {R"([{"entry": "decode", "args": {"token": [[1]]}}])", "decode: missing argument 'pos'"},
      {R"([{"entry": "decode", "args": {"token": [[1], [2]], "pos": 0}}])", "token has shape [2, 1], expected [Batch, 1] with Batch=1"},
      {R"([{"entry": "forward", "args": {"tokens": "prompt"}}])", "input tensor 'prompt' is not in --inputs"},
      {R"([{"entry": "forward", "args": {"tokens": [[1]]}, "output": ["x"]}])", "unknown key 'output'"},
      {R"([{"entry": "forward", "args": {"tokens": [[1]]}, "outputs": ["x", "y"]}])", "returns 1 result(s), but 2"},
  };
  for (const auto& [calls, want] : cases) {
    SCOPED_TRACE(calls);
    write_text(d / "calls.json", calls);
    EXPECT_ERROR(run_linnet(run_args(d, d / "calls.json")), 1, want);
  }
  write_text(d / "calls.json", R"([{"entry": "forward", "args": {"tokens": [[1]]}, "outputs": ["x"]}])");
  EXPECT_ERROR(run_linnet(run_args(d, d / "calls.json", {"--outputs", "/nonexistent/dir/out.safetensors"})), 1,
               "cannot write --outputs: directory /nonexistent/dir does not exist");
  // And with weights the same calls run.
  EXPECT_EQ(run_linnet(run_args(tiny(), d / "calls.json", {"--outputs", (d / "out.safetensors").string()})).exit_code, 0);
}

// Each command's usage line is made from its options (before: serve's left out
// --http-threads, --batch and --shards): every option its --help lists is in it.
TEST(Cli, EveryUsageLineListsEveryOption) {
  for (const char* cmd : {"run", "generate", "eval", "serve", "bench", "bench-engine", "inspect", "init", "pack",
                          "import-llama2c", "tokenize", "detokenize", "devices"}) {
    SCOPED_TRACE(cmd);
    const auto r = run_linnet({cmd, "--help"});
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    const size_t eol = r.output.find('\n');
    const std::string usage = r.output.substr(0, eol), options = r.output.substr(eol);
    size_t listed = 0;
    for (size_t at = 0; (at = options.find("\n  --", at)) != std::string::npos; ++at) {
      const size_t end = options.find_first_of(" \n", at + 3);
      const std::string opt = options.substr(at + 3, end - at - 3);
      if (opt == "--help") continue;
      ++listed;
      EXPECT_TRUE(usage.find(opt + " ") != std::string::npos || usage.find(opt + "]") != std::string::npos ||
                  usage.ends_with(opt))
          << "usage line lacks " << opt << ": " << usage;
    }
    EXPECT_GT(listed, 0u) << r.output;
  }
  const auto serve = run_linnet({"serve", "--help"});
  for (const char* opt : {"--http-threads", "--batch", "--shards"})
    EXPECT_NE(serve.output.substr(0, serve.output.find('\n')).find(opt), std::string::npos) << opt;
}

// ---- counts, flags that disagree, and errors that name the cause ----------------------------

// Before: --threads 65536 crashed inside OpenMP, --tp -1 ran, eval --max-length -1 and
// --prefix-token -2 were taken as defaults, tokenize --bench-seconds -1 was accepted and
// generate --stop "" ended every completion after one token.
TEST(Cli, CountsAreBounded) {
  const fs::path d = fresh_dir("counts");
  write_text(d / "calls.json", R"([{"entry": "forward", "args": {"tokens": [[1, 2]]}}])");
  write_text(d / "in.jsonl", R"({"text": "a"})" "\n");
  const std::string ck = tiny().string(), calls = (d / "calls.json").string(), in = (d / "in.jsonl").string(),
                    out = (d / "out.jsonl").string();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run", "--checkpoint", ck, "--calls", calls, "--threads", "65536"}, "--threads 65536 is more than 4 ×"},
      {{"run", "--checkpoint", ck, "--calls", calls, "--threads", "40000"}, "--threads 40000 is more than 4 ×"},
      {{"run", "--checkpoint", ck, "--calls", calls, "--tp", "-1"}, "--tp must be 0 or more, got -1"},
      {{"eval", "--checkpoint", ck, "--data", in, "--output", out, "--max-length", "-1"}, "--max-length must be 0 or more"},
      {{"eval", "--checkpoint", ck, "--data", in, "--output", out, "--prefix-token", "-2"}, "--prefix-token must be 0 or more"},
      {{"tokenize", "--checkpoint", ck, "--bench", in, "--bench-seconds", "-1"}, "--bench-seconds must be 0 or more"},
      {{"generate", "--checkpoint", ck, "--prompts", in, "--output", out, "--seed", "-1"}, "--seed must be 0 or more"},
      {{"generate", "--checkpoint", ck, "--prompts", in, "--output", out, "--stop", ""}, "--stop \"\" would end every completion"},
      {{"run", "--checkpoint", ck, "--calls", calls, "--shards", "0"}, "--shards must be at least 1, got 0"},
      {{"serve", "--checkpoint", ck, "--http-timeout", "0"}, "--http-timeout must be in [0.01, 86400] seconds"},
  };
  for (const auto& [args, want] : cases) {
    SCOPED_TRACE(args[0] + " " + args[args.size() - 2] + " " + args.back());
    EXPECT_ERROR(run_linnet(args), 2, want);
  }
}

// Before: `mpirun -np 2 … --shards 1` ran at Shards 2 without a word, and bench took
// --config --random-weights over --checkpoint.
TEST(Cli, FlagsThatDisagreeAreRefused) {
  const fs::path d = fresh_dir("disagree");
  write_text(d / "calls.json", R"([{"entry": "forward", "args": {"tokens": [[1, 2]]}}])");
  const auto m = linnet::testing::mpi_run(2, LINNET_BINARY, run_args(tiny(), d / "calls.json", {"--shards", "1"}), 60, true);
  if (m.output.find("mpirun not found") == std::string::npos) {
    EXPECT_EQ(m.exit_code, 1) << m.errors;
    EXPECT_NE(m.errors.find("--shards 1 but this replica's shard group has 2 rank(s)"), std::string::npos) << m.errors;
    EXPECT_NE(m.errors.find("--tp 1"), std::string::npos) << m.errors;
    // As asked: two replicas of one shard.
    const auto ok = linnet::testing::mpi_run(2, LINNET_BINARY, run_args(tiny(), d / "calls.json", {"--shards", "1", "--tp", "1"}), 60, true);
    EXPECT_EQ(ok.exit_code, 0) << ok.errors;
  }
  for (const char* cmd : {"bench", "bench-engine"})
    EXPECT_ERROR(run_linnet({cmd, "--checkpoint", tiny().string(), "--config", "tiny", "--random-weights"}), 2,
                 "give one or the other");
  EXPECT_ERROR(run_linnet({"bench", "--checkpoint", tiny().string(), "--config", "tiny"}), 2, "--checkpoint runs");
  EXPECT_ERROR(run_linnet({"bench", "--config", "tiny"}), 2, "--config needs --random-weights");
}

// Before: "--prefix-token 40000" said the tokenizer had neither BOS nor EOS, and a
// continuation longer than the window "a window needs a context and tokens to score".
TEST(Cli, EvalNamesTheRuleAndTheLengths) {
  const fs::path d = fresh_dir("eval_rules");
  const fs::path model = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval/model";
  write_text(d / "in.jsonl", R"({"id": "short", "context": "the cat", "continuation": " sat"})" "\n"
                        R"({"id": "long", "context": "a", "continuation": " the cat sat on the mat and the dog sat on the log"})" "\n");
  auto r = run_linnet({"eval", "--checkpoint", model.string(), "--data", (d / "in.jsonl").string(), "--output",
                       (d / "out.jsonl").string(), "--backend", "cpu", "--prefix-token", "40000"});
  EXPECT_ERROR(r, 2, "--prefix-token 40000 is not a token id in [0, Vocab=1398)");
  r = run_linnet({"eval", "--checkpoint", model.string(), "--data", (d / "in.jsonl").string(), "--output",
                  (d / "out.jsonl").string(), "--backend", "cpu", "--max-length", "4", "--on-error", "skip"});
  EXPECT_EQ(r.exit_code, 3) << r.errors;
  EXPECT_NE(r.errors.find("in.jsonl:2: the continuation is"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("max_length = 4 tokens"), std::string::npos) << r.errors;
}

// Before: --checkpoint model.safetensors or stories15M.bin said "malformed JSON: invalid
// literal", and a parent folder "no such file".
TEST(Cli, ACheckpointThatIsNotOneIsNamedForWhatItIs) {
  const fs::path d = fresh_dir("not_checkpoint");
  fs::create_directories(d / "models");
  fs::copy(tiny(), d / "models/tiny-a");
  fs::copy(tiny(), d / "models/tiny-b");
  write_text(d / "stories15M.bin", std::string(64, '\0'));
  write_text(d / "calls.json", R"([{"entry": "forward", "args": {"tokens": [[1, 2]]}}])");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {(d / "models/tiny-a/model.safetensors").string(), "a checkpoint is a directory (config.json + *.safetensors"},
      {(d / "stories15M.bin").string(), "linnet import-llama2c --input"},
      {(d / "models").string(), "its subfolders tiny-a, tiny-b are checkpoints: give one of them"},
  };
  for (const auto& [path, want] : cases) {
    SCOPED_TRACE(path);
    const auto r = run_linnet(run_args(path, d / "calls.json"));
    EXPECT_ERROR(r, 1, want);
    EXPECT_EQ(r.errors.find("malformed JSON"), std::string::npos) << r.errors;
  }
}

TEST(Cli, AnUnknownOptionGetsTheNearestOne) {
  const fs::path d = fresh_dir("nearest");
  write_text(d / "in.jsonl", R"({"text": "a"})" "\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--max-tokens", "did you mean --max-new-tokens?"},
      {"--temprature", "did you mean --temperature?"},
      {"--checkpiont", "did you mean --checkpoint?"},
  };
  for (const auto& [given, want] : cases) {
    const auto r = run_linnet({"generate", "--checkpoint", tiny().string(), "--prompts", (d / "in.jsonl").string(),
                               "--output", (d / "o.jsonl").string(), given, "3"});
    EXPECT_ERROR(r, 2, want);
  }
}

// issue 34 item 3: Shards past KvHeads replicate the KV heads, and inspect says so (before:
// "KvHeads=1 does not divide by Shards=4").
TEST(Cli, InspectPrintsReplicatedKvHeads) {
  const fs::path mqa = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden/mqa";
  const auto r = run_linnet({"inspect", "--checkpoint", mqa.string(), "--shards", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_NE(r.output.find("KV heads replicated: KvHeads 1 < Shards 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("layers[*].attention.k_proj.weight\trows (×4 replicated)\t[6, 48]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("= 2 × 2 layers × [1, 1, 64, 6]"), std::string::npos) << r.output;
  const auto three = run_linnet({"inspect", "--checkpoint", (fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden/gqa").string(),
                                 "--shards", "3"});
  EXPECT_NE(three.errors.find("does not divide by Shards=3"), std::string::npos) << three.errors;
}

// issue 37 item 4: --kv-cache-dtype. inspect counts the narrower cache and names its dtype; a
// value that is not a dtype, or one linnet does not keep a cache in, is a usage error naming it.
TEST(Cli, KvCacheDtypeIsCountedByInspectAndBadValuesAreRefused) {
  const fs::path mqa = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden/mqa";
  auto r = run_linnet({"inspect", "--checkpoint", mqa.string(), "--kv-cache-dtype", "fp8"});
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_NE(r.output.find("= 2 × 2 layers × [1, 1, 64, 6] f8_e4m3 (--kv-cache-dtype)"), std::string::npos) << r.output;
  r = run_linnet({"inspect", "--checkpoint", mqa.string(), "--kv-cache-dtype", "auto", "--shards", "4"});
  EXPECT_NE(r.output.find("= 2 × 2 layers × [1, 1, 64, 6] f32\n"), std::string::npos) << r.output;
  r = run_linnet({"inspect", "--checkpoint", mqa.string(), "--kv-cache-dtype", "fp8_e5m2"});
  EXPECT_EQ(r.exit_code, 2) << r.errors;
  EXPECT_NE(r.errors.find("--kv-cache-dtype 'fp8_e5m2': expected auto, bf16, f16, fp8 (fp8_e4m3) or f32 (E5M2 is not kept "
                          "yet)"),
            std::string::npos)
      << r.errors;
  r = run_linnet({"inspect", "--checkpoint", mqa.string(), "--kv-cache-dtype", "int4"});
  EXPECT_EQ(r.exit_code, 2) << r.errors;
  EXPECT_NE(r.errors.find("--kv-cache-dtype 'int4'"), std::string::npos) << r.errors;
}
