// `linnet generate` end to end: files of prompts, one rank and several (Shards and replicas),
// greedy and sampled, malformed lines, --resume, stop strings, a pool that must preempt.
// A small random model with a real tokenizer runs everywhere; stories15M where it can be had.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "architectures/hf_config.h"
#include "runtime/write_checkpoint.h"
#include "layers/generics.h"
#include "model_fixtures.h"
#include "mpi_run.h"

using namespace linnet;
using linnet::testing::linnet_run;
namespace fs = std::filesystem;
using nlohmann::json;

using linnet::testing::fresh_dir;
using linnet::testing::write_text;

namespace {

std::vector<json> read_jsonl(const fs::path& p) {
  std::vector<json> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

using linnet::testing::tiny_text_model;

std::string prompts_of(const std::vector<std::string>& texts, const std::string& extra = "") {
  std::string s;
  for (size_t i = 0; i < texts.size(); ++i)
    s += json{{"id", "p" + std::to_string(i)}, {"text", texts[i]}}.dump().insert(1, extra) + "\n";
  return s;
}

// 65 prompts of mixed lengths.
std::vector<std::string> mixed_texts() {
  std::vector<std::string> t;
  const std::string words = "Once upon a time the cat sat on a warm mat while rain fell over quiet hills and far rivers ";
  for (int i = 0; i < 65; ++i) t.push_back(words.substr(0, 4 + (i * 13) % (words.size() - 4)));
  return t;
}

std::vector<std::string> args(const fs::path& ckpt, const fs::path& in, const fs::path& out,
                              std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"generate", "--checkpoint", ckpt.string(), "--prompts", in.string(),
                                "--output", out.string(), "--backend", "cpu"};
  if (std::find(more.begin(), more.end(), "--max-new-tokens") == more.end()) a.insert(a.end(), {"--max-new-tokens", "12"});
  // The tests reuse their output files: replacing them is what they mean unless they resume.
  if (std::find(more.begin(), more.end(), "--resume") == more.end()) a.push_back("--overwrite");
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

}  // namespace

TEST(Generate, OnceUponATimeGivesTheKnownStory) {
  LINNET_NEED_STORIES15M();
  const fs::path ckpt = linnet::testing::stories15m_checkpoint(), d = fresh_dir("stories");
  fs::copy_file(linnet::testing::stories15m_files().dir / "tokenizer.model", ckpt / "tokenizer.model",
                fs::copy_options::skip_existing);
  write_text(d / "in.jsonl", R"({"text": "Once upon a time"})" "\n");
  const auto r = linnet_run(args(ckpt, d / "in.jsonl", d / "out.jsonl", {"--max-new-tokens", "10"}));
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  const auto out = read_jsonl(d / "out.jsonl");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["tokens"], json({29892, 727, 471, 263, 2217, 7826, 4257, 365, 2354, 29889}));
  EXPECT_EQ(out[0]["text"], ", there was a little girl named Lily.");
  EXPECT_EQ(out[0]["prompt_tokens"], 5);  // BOS + 4 (SentencePiece adds BOS)
  EXPECT_EQ(out[0]["finish_reason"], "length");
  EXPECT_NE(r.output.find("generate: 1 completions"), std::string::npos) << r.output;
}

namespace {

// Each prompt alone gives what it gives among 64 others; and so do 2 and 3 ranks, as
// shards of one replica or as replicas. Greedy, and sampled with top-k.
void outputs_do_not_depend_on_batch_nor_ranks(const fs::path& ckpt, const std::vector<std::string>& texts,
                                              const std::string& name) {
  const fs::path d = fresh_dir(name);
  // Greedy; top-k sampling; top-p (nucleus) sampling, whose candidates cross the vocab shards.
  for (const std::string mode : {"greedy", "top-k", "top-p"}) {
    SCOPED_TRACE(mode);
    const std::vector<std::string> sampling =
        mode == "greedy" ? std::vector<std::string>{}
        : mode == "top-k" ? std::vector<std::string>{"--temperature", "0.9", "--top-k", "50", "--seed", "7"}
                          : std::vector<std::string>{"--temperature", "1.1", "--top-p", "0.9", "--seed", "11"};
    write_text(d / "in.jsonl", prompts_of(texts));
    auto r = linnet_run(args(ckpt, d / "in.jsonl", d / "all.jsonl", sampling));
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    const auto all = read_jsonl(d / "all.jsonl");
    ASSERT_EQ(all.size(), texts.size());
    for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i]["id"], "p" + std::to_string(i));  // input order
    for (size_t i : {size_t{0}, size_t{5}, texts.size() - 1}) {
      write_text(d / "one.jsonl", json{{"id", "p" + std::to_string(i)}, {"text", texts[i]}}.dump() + "\n");
      r = linnet_run(args(ckpt, d / "one.jsonl", d / "one_out.jsonl", sampling));
      ASSERT_EQ(r.exit_code, 0) << r.errors;
      EXPECT_EQ(read_jsonl(d / "one_out.jsonl").at(0), all[i]) << "prompt " << i << " alone";
    }
    for (auto [np, tp] : std::vector<std::pair<int, int>>{{2, 2}, {2, 1}, {3, 3}, {3, 1}}) {
      std::vector<std::string> a = args(ckpt, d / "in.jsonl", d / "ranks.jsonl", sampling);
      a.insert(a.end(), {"--tp", std::to_string(tp)});
      r = linnet_run(a, 300, np);
      if (r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
      ASSERT_EQ(r.exit_code, 0) << "np " << np << " tp " << tp << ": " << r.errors;
      EXPECT_EQ(read_jsonl(d / "ranks.jsonl"), all) << "np " << np << " --tp " << tp;
      EXPECT_FALSE(fs::exists(d / "ranks.jsonl.part0"));
    }
  }
}

}  // namespace

TEST(Generate, OutputsDoNotDependOnBatchNorRanks) {
  outputs_do_not_depend_on_batch_nor_ranks(tiny_text_model(), mixed_texts(), "ranks");
}

TEST(Generate, Stories15MOutputsDoNotDependOnBatchNorRanks) {
  LINNET_NEED_STORIES15M();
  const fs::path ckpt = linnet::testing::stories15m_checkpoint();
  fs::copy_file(linnet::testing::stories15m_files().dir / "tokenizer.model", ckpt / "tokenizer.model",
                fs::copy_options::skip_existing);
  outputs_do_not_depend_on_batch_nor_ranks(ckpt, mixed_texts(), "stories_ranks");
}

// A pool too small for every prompt at once preempts and recomputes; prompts sharing a long
// prefix hold it once. Neither changes an output.
TEST(Generate, PreemptionAndPrefixSharingChangeNoOutput) {
  const fs::path ckpt = tiny_text_model(), d = fresh_dir("pool");
  std::vector<std::string> texts = mixed_texts();
  const std::string system = std::string(200, 'x').replace(0, 60, "You are a careful assistant who answers briefly and well. ");
  for (auto& t : texts) t = system.substr(0, 120) + t;
  write_text(d / "in.jsonl", prompts_of(texts));
  auto r = linnet_run(args(ckpt, d / "in.jsonl", d / "roomy.jsonl", {"--max-seq", "256", "--page-size", "16"}));
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  // 256 positions × 2 layers × 6 heads × 8 dims × 2 × 4 bytes = 196608 bytes: one sequence.
  r = linnet_run(args(ckpt, d / "in.jsonl", d / "tight.jsonl",
                      {"--max-seq", "256", "--page-size", "16", "--kv-cache-memory", "196608", "--log-level", "info"}));
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(read_jsonl(d / "tight.jsonl"), read_jsonl(d / "roomy.jsonl"));
  EXPECT_NE(r.errors.find("KV pool: 16 pages"), std::string::npos) << r.errors;
  EXPECT_EQ(r.errors.find(" 0 preemptions"), std::string::npos) << "the tight pool never preempted: " << r.errors;
  // A fraction of the free memory: ample here, the same output; too small a fraction names
  // what does not fit; neither a fraction nor bytes is a usage error.
  r = linnet_run(args(ckpt, d / "in.jsonl", d / "half.jsonl", {"--max-seq", "256", "--page-size", "16", "--kv-cache-memory", "0.5"}));
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(read_jsonl(d / "half.jsonl"), read_jsonl(d / "roomy.jsonl"));
  r = linnet_run(args(ckpt, d / "in.jsonl", d / "none.jsonl", {"--max-seq", "256", "--kv-cache-memory", "1e-15"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.errors.find("fewer than MaxSeq = 256 (one whole sequence): lower --max-seq or raise --kv-cache-memory"),
            std::string::npos) << r.errors;
  r = linnet_run(args(ckpt, d / "in.jsonl", d / "none.jsonl", {"--kv-cache-memory", "lots"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.errors.find("--kv-cache-memory 'lots': expected a fraction in (0, 1] or bytes"), std::string::npos) << r.errors;
}

TEST(Generate, MalformedLinesAreNamedAndSkippedOrStop) {
  const fs::path ckpt = tiny_text_model(), d = fresh_dir("bad");
  write_text(d / "in.jsonl",
        "{\"id\": \"a\", \"text\": \"hello there\"}\n"
        "{\"id\": \"b\", \"text\": \"unclosed\n"
        "{\"id\": \"c\"}\n"
        "\n"
        "{\"id\": \"d\", \"text\": \"\"}\n"
        "{\"id\": \"e\", \"tokens\": [3, 99999]}\n"
        "{\"id\": \"f\", \"text\": \"x\", \"temprature\": 1}\n"
        "{\"id\": \"g\", \"tokens\": [5, 6, 7], \"max_new_tokens\": 1000}\n"
        "{\"id\": \"a\", \"text\": \"again\"}\n"
        "{\"id\": \"h\", \"text\": \"the end\"}\n");
  auto r = linnet_run(args(ckpt, d / "in.jsonl", d / "out.jsonl"));
  EXPECT_EQ(r.exit_code, 1);
  for (const char* want : {"in.jsonl:2: malformed JSON", "in.jsonl:3: give exactly one of \"text\", \"tokens\" and \"messages\"",
                           "in.jsonl:5: \"text\" is empty", "in.jsonl:6: `tokens[1]` = 99999 is not a token id",
                           "in.jsonl:7: unknown key 'temprature'", "in.jsonl:9: id \"a\" is already the id of line 1"})
    EXPECT_NE(r.errors.find(want), std::string::npos) << want << "\n" << r.errors;
  EXPECT_TRUE(read_jsonl(d / "out.jsonl").empty()) << "--on-error stop ran something";
  r = linnet_run(args(ckpt, d / "in.jsonl", d / "out.jsonl", {"--on-error", "skip"}));
  ASSERT_EQ(r.exit_code, 3) << r.errors;  // some lines ended in an error (docs/cli.md)
  const auto out = read_jsonl(d / "out.jsonl");
  ASSERT_EQ(out.size(), 9u);  // every line, in order: results or errors
  EXPECT_EQ(out[0]["id"], "a");
  EXPECT_TRUE(out[0].contains("text"));
  EXPECT_NE(out[1]["error"].get<std::string>().find("in.jsonl:2"), std::string::npos);
  // A prompt that can never fit is refused by itself; the others carry on.
  EXPECT_NE(out[6]["error"].get<std::string>().find("exceeds MaxSeq = 256"), std::string::npos) << out[6];
  EXPECT_EQ(out[8]["id"], "h");
  EXPECT_TRUE(out[8].contains("tokens"));
}

// A job killed part-way keeps its finished lines; --resume runs only the rest.
TEST(Generate, ResumeRunsOnlyWhatIsMissing) {
  const fs::path ckpt = tiny_text_model(), d = fresh_dir("resume");
  write_text(d / "in.jsonl", prompts_of(mixed_texts()));
  ASSERT_EQ(linnet_run(args(ckpt, d / "in.jsonl", d / "full.jsonl")).exit_code, 0);
  const auto full = read_jsonl(d / "full.jsonl");
  for (int np : {0, 2}) {
    SCOPED_TRACE(np);
    {  // as a killed run leaves it: 5 finished lines and half of a sixth
      std::ofstream o(d / "out.jsonl");
      for (int i = 0; i < 5; ++i) o << full[i].dump() << "\n";
      o << full[5].dump().substr(0, 20);
    }
    std::vector<std::string> a = args(ckpt, d / "in.jsonl", d / "out.jsonl", {"--resume"});
    if (np) a.insert(a.end(), {"--tp", "1"});
    const auto r = linnet_run(a, 180, np);
    if (r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_NE(r.output.find("60 completions (0 errors, 5 already done)"), std::string::npos) << r.output;
    std::ifstream in(d / "out.jsonl");
    std::stringstream ss;
    ss << in.rdbuf();
    std::vector<json> got;
    for (std::string line; std::getline(ss, line);)
      if (line.rfind("{", 0) == 0 && line.back() == '}') got.push_back(json::parse(line));
    EXPECT_EQ(got, full);
  }
}

TEST(Generate, StopStringsEosIdsAndIgnoreEos) {
  const fs::path ckpt = tiny_text_model(), d = fresh_dir("stop");
  write_text(d / "in.jsonl", R"({"id": 1, "text": "the cat"})" "\n");
  ASSERT_EQ(linnet_run(args(ckpt, d / "in.jsonl", d / "free.jsonl", {"--ignore-eos", "--max-new-tokens", "20"})).exit_code, 0);
  const json free = read_jsonl(d / "free.jsonl").at(0);
  const std::string text = free["text"];
  ASSERT_GT(text.size(), 6u);
  // A stop string: the text ends before it, the tokens at the one that completed it.
  size_t k = 2;
  while (k < text.size() && !std::isalpha(static_cast<unsigned char>(text[k]))) ++k;
  ASSERT_LT(k, text.size()) << text;
  const std::string stop = text.substr(k, 1);  // a letter (the model's text is random)
  write_text(d / "in2.jsonl", json{{"id", 1}, {"text", "the cat"}, {"stop", stop}, {"ignore_eos", true}, {"max_new_tokens", 20}}.dump() + "\n");
  ASSERT_EQ(linnet_run(args(ckpt, d / "in2.jsonl", d / "stopped.jsonl")).exit_code, 0);
  const json stopped = read_jsonl(d / "stopped.jsonl").at(0);
  EXPECT_EQ(stopped["finish_reason"], "stop");
  EXPECT_EQ(stopped["text"], text.substr(0, text.find(stop)));
  EXPECT_LT(stopped["tokens"].size(), free["tokens"].size());
  // generation_config.json's eos ids stop it too (here: the free run's 4th token).
  const fs::path ck2 = d / "ckpt";
  fs::copy(ckpt, ck2);
  write_text(ck2 / "generation_config.json", json{{"eos_token_id", json::array({1, free["tokens"][3]})}}.dump());
  ASSERT_EQ(linnet_run(args(ck2, d / "in.jsonl", d / "eos.jsonl", {"--max-new-tokens", "20"})).exit_code, 0);
  const json eos = read_jsonl(d / "eos.jsonl").at(0);
  EXPECT_EQ(eos["finish_reason"], "stop");
  EXPECT_EQ(eos["completion_tokens"], 4);
  EXPECT_EQ(eos["tokens"][3], free["tokens"][3]);
}

// A tokenizer larger than the model's Vocab (a mismatched checkpoint) is named at the line
// whose text encodes beyond it, by generate and by eval, instead of indexing past the
// embedding.
TEST(Generate, TokenizerIdsBeyondVocabAreNamed) {
  ModelConfig c = linnet::testing::tiny_config();
  c.vocab = 300;  // the fixture tokenizer has 1398 tokens
  c.max_position = 256;
  const fs::path ckpt = linnet::testing::random_checkpoint_with_tokenizer("linnet_gen_small_vocab", c, 22);
  const fs::path d = fresh_dir("small_vocab");
  write_text(d / "in.jsonl", prompts_of({"the cat sat on the mat"}));
  auto r = linnet_run(args(ckpt, d / "in.jsonl", d / "out.jsonl"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.errors.find("in.jsonl:1: `text`: the tokenizer gives token id"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("beyond the model's Vocab=300"), std::string::npos) << r.errors;
  r = linnet_run({"eval", "--checkpoint", ckpt.string(), "--data", (d / "in.jsonl").string(), "--output",
                  (d / "eval.jsonl").string(), "--backend", "cpu"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.errors.find("beyond the model's Vocab=300"), std::string::npos) << r.errors;
}

// A checkpoint whose max_position_embeddings (16) is below the default page size runs with
// pages of MaxSeq, and says so; a --page-size given that does not divide MaxSeq is still
// refused (issue 35: `MaxSeq=16 does not divide by PageSize=64` before).
TEST(Generate, AShortMaxSeqSetsThePageSize) {
  ModelConfig c = linnet::testing::tiny_text_config();
  c.max_position = 16;
  EXPECT_EQ(bind_generics(c, RunOptions{}).page_size, 16);
  EXPECT_EQ(bind_generics(c, RunOptions{1, 12, 1, 0, std::nullopt}).page_size, 12);  // --max-seq 12: pages of 12
  EXPECT_EQ(bind_generics(linnet::testing::tiny_text_config(), RunOptions{}).page_size, kDefaultPageSize);
  const fs::path ckpt = linnet::testing::random_checkpoint_with_tokenizer("linnet_gen_maxseq16", c, 23);
  const fs::path d = fresh_dir("gen_maxseq16");
  write_text(d / "in.jsonl", prompts_of({"Once upon a time", "The cat"}));
  auto r = linnet_run(args(ckpt, d / "in.jsonl", d / "out.jsonl", {"--max-new-tokens", "4"}));
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_NE(r.errors.find("PageSize 16: MaxSeq 16 is below the default page size 64"), std::string::npos) << r.errors;
  const auto out = read_jsonl(d / "out.jsonl");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["completion_tokens"], 4);
  // eval binds MaxSeq = PageSize: the same rule.
  write_text(d / "docs.jsonl", R"({"id": "d", "text": "Once upon a time the cat sat."})" "\n");
  r = linnet_run({"eval", "--checkpoint", ckpt.string(), "--data", (d / "docs.jsonl").string(), "--output",
                  (d / "scores.jsonl").string(), "--backend", "cpu"});
  EXPECT_EQ(r.exit_code, 0) << r.errors;
  r = linnet_run(args(ckpt, d / "in.jsonl", d / "out.jsonl", {"--max-new-tokens", "4", "--page-size", "64"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.errors.find("MaxSeq=16 does not divide by PageSize=64"), std::string::npos) << r.errors;
  r = linnet_run(args(ckpt, d / "in.jsonl", d / "out.jsonl", {"--page-size", "0"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.errors.find("--page-size must be at least 1, got 0"), std::string::npos) << r.errors;
}
