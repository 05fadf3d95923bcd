// Reasoning parsers (engine/reasoning.h) through CompletionText, token by token as the engine
// pushes them, on canned answers of each format: a byte-level tokenizer (the hf_bytelevel
// fixture) with the formats' markers added as tokenizers adds them (the next free ids).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/completion_text.h"
#include "engine/reasoning.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using linnet::Tokenizer;
using linnet::TokenId;
using namespace linnet::engine;

namespace {

const std::vector<std::string> kMarkers = {"<|start|>", "<|end|>",  "<|message|>", "<|channel|>", "<|constrain|>",
                                           "<|return|>", "<|call|>", "<think>",     "</think>"};

const Tokenizer& marked_tokenizer() {
  static std::unique_ptr<Tokenizer> tok = [] {
    nlohmann::json j;
    std::ifstream(std::string(LINNET_BUILD_SOURCE_DIR) + "/tests/fixtures/tokenizers/hf_bytelevel/tokenizer.json") >> j;
    int64_t next = 0;
    for (const auto& [piece, id] : j["model"]["vocab"].items()) next = std::max(next, id.get<int64_t>() + 1);
    for (const auto& t : j["added_tokens"]) next = std::max(next, t["id"].get<int64_t>() + 1);
    for (const std::string& m : kMarkers)
      j["added_tokens"].push_back({{"id", next++}, {"content", m}, {"single_word", false}, {"lstrip", false},
                                   {"rstrip", false}, {"normalized", false}, {"special", m[1] == '|'}});
    const fs::path d = fs::temp_directory_path() / ("linnet_reasoning_" + std::to_string(::getpid()));
    fs::create_directories(d);
    std::ofstream(d / "tokenizer.json") << j.dump();
    auto t = linnet::load_tokenizer(d.string());
    fs::remove_all(d);
    return t;
  }();
  return *tok;
}

struct Split {
  std::string content, reasoning;
  std::vector<std::pair<std::string, std::string>> calls;
  std::string streamed_content, streamed_reasoning;  // what releasable() let out token by token
};

// `answer` as the model writes it (the prompt ends before it), through a parser, as a server
// would see it: token by token, `end` (if any) the token that stopped it.
Split split(const std::string& parser, const std::string& answer, bool thinking = true,
            std::vector<std::string> stop = {}) {
  const Tokenizer& tok = marked_tokenizer();
  std::vector<TokenId> ids = tok.encode(answer);
  Completion c;
  c.reason = FinishReason::length;
  if (!ids.empty() && (tok.decode({&ids.back(), 1}) == "<|return|>" || tok.decode({&ids.back(), 1}) == "<|call|>")) {
    c.reason = FinishReason::stop;  // generation_config's eos: never pushed
    c.stop_token = ids.back();
  }
  CompletionText text(tok, tok.encode("<|start|>user<|message|>hi<|end|><|start|>assistant"), std::move(stop), {},
                      make_reasoning_parser(parser, tok, thinking));
  Split s;
  size_t sent = 0, rsent = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (c.reason == FinishReason::stop && k + 1 == ids.size()) break;
    c.tokens.push_back(ids[k]);
    const bool stopped = text.push(ids[k]);
    const size_t upto = std::max(sent, text.releasable());
    s.streamed_content += text.text().substr(sent, upto - sent);
    sent = upto;
    s.streamed_reasoning += text.reasoning().substr(rsent);
    rsent = text.reasoning().size();
    if (stopped) {
      c.reason = FinishReason::stop;
      break;
    }
  }
  if (c.reason == FinishReason::stop && c.stop_token >= 0) c.tokens.push_back(c.stop_token);
  text.finish(c);
  s.streamed_content += text.text().substr(std::min(sent, text.text().size()));
  s.streamed_reasoning += text.reasoning().substr(rsent);
  s.content = text.text();
  s.reasoning = text.reasoning();
  s.calls = text.tool_calls();
  return s;
}

}  // namespace

TEST(Reasoning, HarmonyAnalysisThenFinal) {
  const Split s = split("gpt_oss",
                        "<|channel|>analysis<|message|>The user says hi. Answer briefly.<|end|>"
                        "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>");
  EXPECT_EQ(s.reasoning, "The user says hi. Answer briefly.");
  EXPECT_EQ(s.content, "Hello! How can I help?");
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.streamed_reasoning, s.reasoning);
  EXPECT_EQ(s.streamed_content, s.content);
}

TEST(Reasoning, HarmonyCutInsideTheAnalysisIsAllReasoning) {
  const Split s = split("gpt_oss", "<|channel|>analysis<|message|>Let me count: 1, 2, 3");
  EXPECT_EQ(s.reasoning, "Let me count: 1, 2, 3");
  EXPECT_EQ(s.content, "");
}

TEST(Reasoning, HarmonyToolCallAndPreamble) {
  // A preamble on commentary (shown to the user), then a call with its recipient in the
  // header after the channel, constrained to JSON; <|call|> ends it.
  Split s = split("gpt_oss",
                  "<|channel|>analysis<|message|>Need the weather.<|end|>"
                  "<|start|>assistant<|channel|>commentary<|message|>Checking the weather.<|end|>"
                  "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                  "{\"city\": \"Paris\"}<|call|>");
  EXPECT_EQ(s.reasoning, "Need the weather.");
  EXPECT_EQ(s.content, "Checking the weather.");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].first, "functions.get_weather");
  EXPECT_EQ(s.calls[0].second, "{\"city\": \"Paris\"}");
  // The recipient before the channel, as the model may also write it.
  s = split("gpt_oss", "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{}<|call|>");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].first, "functions.lookup");
  EXPECT_EQ(s.calls[0].second, "{}");
  // A built-in tool's call runs in the model's own loop: reasoning.
  s = split("gpt_oss", "<|channel|>analysis to=python code<|message|>print(1)<|call|>");
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.reasoning, "print(1)");
}

TEST(Reasoning, StopStringsApplyToTheAnswerOnly) {
  const Split s = split("gpt_oss",
                        "<|channel|>analysis<|message|>STOP is a word.<|end|>"
                        "<|start|>assistant<|channel|>final<|message|>Go on. STOP here<|return|>",
                        true, {"STOP"});
  EXPECT_EQ(s.reasoning, "STOP is a word.");
  EXPECT_EQ(s.content, "Go on. ");
  EXPECT_EQ(s.streamed_content, s.content);
}

TEST(Reasoning, ThinkTags) {
  // deepseek_r1: R1-0528 writes <think>; R1's template puts it in the prompt (no tag).
  Split s = split("deepseek_r1", "<think>\n2 + 2 is 4.\n</think>\n\nIt is 4.");
  EXPECT_EQ(s.reasoning, "\n2 + 2 is 4.\n");
  EXPECT_EQ(s.content, "\n\nIt is 4.");
  EXPECT_EQ(s.streamed_reasoning, s.reasoning);
  EXPECT_EQ(s.streamed_content, s.content);
  s = split("deepseek_r1", "2 + 2 is 4.</think>It is 4.");
  EXPECT_EQ(s.reasoning, "2 + 2 is 4.");
  EXPECT_EQ(s.content, "It is 4.");
  // Never closed: all reasoning, in a stream and whole alike.
  s = split("deepseek_r1", "<think>still thinking");
  EXPECT_EQ(s.reasoning, "still thinking");
  EXPECT_EQ(s.content, "");
  // qwen3: the same; with enable_thinking false everything is the answer.
  s = split("qwen3", "<think>\nhm\n</think>\n\nYes.");
  EXPECT_EQ(s.reasoning, "\nhm\n");
  EXPECT_EQ(s.content, "\n\nYes.");
  s = split("qwen3", "Yes, plainly.", false);
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "Yes, plainly.");
}

TEST(Reasoning, UnknownNamesAndMissingMarkersAreRefusedByName) {
  const Tokenizer& tok = marked_tokenizer();
  try {
    make_reasoning_parser("granite", tok);
    FAIL() << "no error";
  } catch (const linnet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("granite: unknown (linnet has deepseek_r1, gpt_oss, qwen3, and none)"),
              std::string::npos)
        << e.what();
  }
  auto plain = linnet::load_tokenizer(std::string(LINNET_BUILD_SOURCE_DIR) + "/tests/fixtures/tokenizers/hf_bytelevel");
  try {
    make_reasoning_parser("gpt_oss", *plain);
    FAIL() << "no error";
  } catch (const linnet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpt_oss: the vocabulary has no token `<|start|>`"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(reasoning_parser_for_template("{{ '<|start|>assistant<|channel|>final<|message|>' }}"), "gpt_oss");
  EXPECT_EQ(reasoning_parser_for_template("{{ '<think>' }}"), "");
}

// The harmony fixture's tokenizer (o200k's pre-tokenizer, harmony's special tokens; see
// tools/golden/make_harmony_chat.py): linnet's ids are the `tokenizers` library's.
TEST(Reasoning, HarmonyFixtureTokenizesAsTokenizers) {
  const std::string dir = std::string(LINNET_BUILD_SOURCE_DIR) + "/tests/fixtures/harmony_chat";
  auto tok = linnet::load_tokenizer(dir);
  nlohmann::json canned;
  std::ifstream(dir + "/canned.json") >> canned;
  ASSERT_GE(canned["tokenizer_cases"].size(), 8u);
  for (const auto& c : canned["tokenizer_cases"]) {
    const std::string text = c["text"];
    SCOPED_TRACE(text);
    EXPECT_EQ(tok->encode(text), c["ids"].get<std::vector<TokenId>>());
    EXPECT_EQ(tok->decode(c["ids"].get<std::vector<TokenId>>()), text);
  }
  for (const auto& c : canned["conversations"])
    EXPECT_EQ(tok->encode(c["output"].get<std::string>()), c["output_ids"].get<std::vector<TokenId>>());
}
