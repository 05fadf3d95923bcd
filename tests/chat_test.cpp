// Conversations: the chat request rules (engine/chat_request.h), the server's chat, /tokenize
// and /detokenize bodies without HTTP (serve/openai_api.h), and the commands that read
// conversations — apply-chat-template, generate's messages lines, run-batch (one rank, two
// ranks as shards and as replicas, --resume by custom_id). The real clients against a real
// template and tokenizer are in tests/serve (ctest Serve.chat, Serve.chat_lm_eval, Serve.batch).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/write_checkpoint.h"
#include "core/files.h"
#include "engine/chat_request.h"
#include "engine/request_rules.h"
#include "model_fixtures.h"
#include "mpi_run.h"
#include "sanitized.h"
#include "serve/openai_api.h"

using namespace linnet;
using linnet::testing::linnet_run;
using linnet::testing::fresh_dir;
using linnet::testing::read_jsonl;
using linnet::testing::slurp;
using linnet::testing::write_text;
namespace fs = std::filesystem;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

// A template of Llama 3's shape (written for these tests), over the fixture tokenizer whose
// specials are Llama 3's: BOS, headers, <|eot_id|>; an unknown role raises.
const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}"
    "{% if m.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('Unknown role: ' ~ m.role) }}{% endif %}"
    "<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
    "{% if enable_thinking is defined and not enable_thinking %}(no thinking){% endif %}";
// One that reads content as a list of parts.
const char* kPartsTemplate =
    "{% for m in messages %}[{{ m.role }}]{% if m.content is string %}{{ m.content }}{% else %}"
    "{% for p in m.content %}<{{ p.text }}>{% endfor %}{% endif %}{% endfor %}";





// Random weights, the fixture's byte-level BPE tokenizer and the template above; EOS ids from
// config.json and generation_config.json.
fs::path chat_model() {
  return linnet::testing::random_checkpoint_with_tokenizer(
      "linnet_chat_tiny", linnet::testing::tiny_text_config(), 27, [](const fs::path& d) {
        write_text(d / "chat_template.jinja", kTemplate);
        write_text(d / "generation_config.json", R"({"eos_token_id": [1, 4]})");
      });
}

const Tokenizer& tok() {
  static const auto t = load_tokenizer(chat_model().string());
  return *t;
}
const ChatTemplate& chat() {
  static const ChatTemplate t = ChatTemplate::load(chat_model().string());
  return t;
}

serve::ServedModel served(const ChatTemplate* t = &chat()) {
  serve::ServedModel m;
  m.name = "tiny";
  m.vocab = 1398;
  m.max_seq = 256;
  m.pages = 16;
  m.page_size = 16;
  m.add_bos = true;
  m.chat = t;
  m.no_chat = "this model has no chat template";
  return m;
}

serve::CompletionParams parse_chat(const json& body, const serve::ServedModel& m = served()) {
  return serve::parse_chat_completion(body, ojson::parse(body.dump()), tok(), m);
}

// The message and param of the ApiError a chat body gets ("" when accepted).
std::pair<std::string, std::string> chat_refusal(const json& body, const serve::ServedModel& m = served()) {
  try {
    parse_chat(body, m);
  } catch (const serve::ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return {e.what(), e.param()};
  }
  return {"", ""};
}

const json kHello = json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi there"}}});
const std::string kHelloText =
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";

std::vector<std::string> run_batch_args(const fs::path& in, const fs::path& out, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"run-batch", "--checkpoint", chat_model().string(), "-i", in.string(), "-o", out.string(),
                                "--backend", "cpu", "--served-model-name", "tiny"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// A run-batch output line without what changes from run to run (the time).
json comparable(json line) {
  if (line["response"].is_object() && line["response"]["body"].is_object()) line["response"]["body"].erase("created");
  return line;
}

}  // namespace

TEST(ChatRequest, ContentPartsAsVllmShapesThem) {
  const ojson m = ojson::parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                       {"type": "text", "text": "b"}]}]})");
  // A template that does not loop over content gets the texts joined by a newline…
  ChatRequest r = engine::read_chat_request(m, chat());
  EXPECT_EQ(r.messages[0]["content"], "a\nb");
  EXPECT_TRUE(r.add_generation_prompt);
  // …one that does, the parts as they are.
  const ChatTemplate parts = ChatTemplate::single(kPartsTemplate, ojson::object());
  EXPECT_TRUE(parts.iterates_content(false));
  EXPECT_FALSE(chat().iterates_content(false));
  r = engine::read_chat_request(m, parts);
  EXPECT_EQ(engine::chat_prompt(parts, r, tok(), 1398).text, "[user]<a><b>");
}

// Which templates get content parts as a list: vLLM's "auto" content format, as its
// _detect_content_format finds it (issue 35: a scan of `{% for … in …content… %}` tags took
// MiniCPM5's `range(1, content_parts|length)` for a loop over content, and the template then
// failed on the list). The verdicts are vLLM's detection's own (tests/chat_templates/content_format.py).
TEST(ChatRequest, ContentFormatIsTheOneVllmDetects) {
  const std::vector<std::pair<const char*, bool>> cases = {
      {"{% for m in messages %}{% for i in range(1, m.content_parts|length) %}{% endfor %}{{ '<' + m.content + '>' }}"
       "{% endfor %}", false},
      {"{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}", true},
      {"{% set msgs = messages[1:] %}{% for m in msgs %}{% for p in m.content|list %}{% endfor %}{% endfor %}", true},
      {"{% for m in messages %}{% set content = m.content %}{% for p in content %}{% endfor %}{% endfor %}", true},
      {"{% for m in messages %}{% for line in m.content.split('\\n') %}{% endfor %}{% endfor %}", false},
      {"{% for p in messages[0].content %}{% endfor %}", false},
      {"{% set ns = namespace(x=1) %}{% set ns.x = messages %}{% for m in messages %}{% for p in m.content %}{% endfor %}"
       "{% endfor %}", false},
      {"{% for m in messages %}{% for a, b in m.content %}{% endfor %}{% endfor %}", false},
      {"{% for m in messages %}{% for p in m.content if p.type == 'text' %}{% endfor %}{% endfor %}", true},
      {"{% macro r(m) %}{% for p in m.content %}{% endfor %}{% endmacro %}{% for m in messages %}{{ r(m) }}{% endfor %}",
       true},
      {"{% for m in messages %}{% for p in m.content is not none %}{% endfor %}{% endfor %}", false},
      {"{% for m in messages %}{% for p in m.content is iterable %}{% endfor %}{% endfor %}", true},
      {"{% for m in messages %}{% for p in m.content %}", false},  // does not parse
  };
  for (const auto& [source, parts] : cases) {
    SCOPED_TRACE(source);
    EXPECT_EQ(ChatTemplate::single(source, ojson::object()).iterates_content(false), parts);
  }
  // The first one given parts: the joined text, as vLLM hands it over.
  const ChatTemplate t = ChatTemplate::single(cases[0].first, ojson::object());
  const ojson m = ojson::parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                       {"type": "text", "text": "b"}]}]})");
  EXPECT_EQ(t.render(engine::read_chat_request(m, t)), "<a\nb>");
}

TEST(ChatRequest, BadConversationsAreNamedByIndex) {
  auto refusal = [](const std::string& body) {
    try {
      engine::chat_prompt(chat(), engine::read_chat_request(ojson::parse(body), chat()), tok(), 1398);
    } catch (const engine::FieldError& e) {
      return e.field() + ": " + e.what();
    }
    return std::string();
  };
  EXPECT_EQ(refusal("{}"), "messages: `messages` is required: a list of {\"role\", \"content\"} objects");
  EXPECT_EQ(refusal(R"({"messages": []})"), "messages: `messages` must be a non-empty list of {\"role\", \"content\"} objects, got []");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}, 5]})"),
            "messages: `messages[1]` must be an object with a \"role\", got 5");
  EXPECT_EQ(refusal(R"({"messages": [{"content": "x"}]})"),
            "messages: `messages[0].role` must be a string (\"system\", \"user\", \"assistant\", …), got none");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})"),
            "messages: `messages[0].content[0].type` = \"image_url\" is not supported: linnet serves text models "
            "(content parts of type \"text\" only)");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": 3}]})"),
            "messages: `messages[0].content` must be a string, null or a list of content parts, got 3");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true,
                        "add_generation_prompt": true})"),
            "continue_final_message: `continue_final_message` and `add_generation_prompt` cannot both be true: the "
            "final message is either continued or followed by the assistant's turn");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [1]})"),
            "chat_template_kwargs: `chat_template_kwargs` must be an object (e.g. {\"enable_thinking\": false}), got [1]");
  // The template's raise_exception: its own words.
  EXPECT_EQ(refusal(R"({"messages": [{"role": "robot", "content": "x"}]})"), "messages: Unknown role: robot");
}

TEST(ChatRequest, ThePromptIsTheRenderedTextWithoutASecondBos) {
  const auto r = engine::read_chat_request(ojson{{"messages", kHello}}, chat());
  const auto p = engine::chat_prompt(chat(), r, tok(), 1398);
  EXPECT_EQ(p.text, kHelloText);
  EXPECT_EQ(p.ids, tok().encode(kHelloText, false));
  EXPECT_EQ(p.ids[0], 0);  // the template's BOS, once
  EXPECT_NE(p.ids[1], 0);
  // continue_final_message: the last message left open, no generation prompt by default.
  ojson cont{{"messages", kHello}, {"continue_final_message", true}};
  cont["messages"].push_back({{"role", "assistant"}, {"content", "Hello, I"}});
  EXPECT_EQ(engine::chat_prompt(chat(), engine::read_chat_request(cont, chat()), tok(), 1398).text,
            kHelloText + "Hello, I");
  // chat_template_kwargs reach the template.
  ojson kw{{"messages", kHello}, {"chat_template_kwargs", {{"enable_thinking", false}}}};
  EXPECT_EQ(engine::chat_prompt(chat(), engine::read_chat_request(kw, chat()), tok(), 1398).text, kHelloText + "(no thinking)");
  // reasoning_effort (OpenAI's, vLLM's; gpt-oss's template reads it): the template variable of that name.
  EXPECT_EQ(engine::read_chat_request(ojson{{"messages", kHello}, {"reasoning_effort", "high"}}, chat())
                .kwargs["reasoning_effort"],
            "high");
  EXPECT_EQ(engine::read_chat_request(ojson{{"messages", kHello}, {"reasoning_effort", "low"},
                                            {"chat_template_kwargs", {{"reasoning_effort", "low"}, {"x", 1}}}},
                                      chat())
                .kwargs,
            (ojson{{"reasoning_effort", "low"}, {"x", 1}}));
  auto refused = [&](const ojson& j) {
    try {
      engine::read_chat_request(j, chat());
    } catch (const engine::FieldError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused(ojson{{"messages", kHello}, {"reasoning_effort", "max"}})
                .find("`reasoning_effort` must be \"low\", \"medium\" or \"high\", got \"max\""),
            std::string::npos);
  EXPECT_NE(refused(ojson{{"messages", kHello}, {"reasoning_effort", "low"},
                          {"chat_template_kwargs", {{"reasoning_effort", "high"}}}})
                .find("disagree"),
            std::string::npos);
}

TEST(ServeChat, BodiesAreCheckedAndRefusedByName) {
  auto c = parse_chat({{"messages", kHello}, {"max_completion_tokens", 7}, {"max_tokens", 3}, {"n", 2}, {"seed", 4}});
  EXPECT_TRUE(c.chat);
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_EQ(c.prompts[0].ids, tok().encode(kHelloText, false));
  EXPECT_EQ(c.max_tokens, std::vector<int64_t>{7});  // max_completion_tokens wins
  EXPECT_EQ(c.n, 2);
  EXPECT_FLOAT_EQ(c.sampling.temperature, 1.0f);
  c = parse_chat({{"messages", kHello}});
  EXPECT_EQ(c.max_tokens, std::vector<int64_t>{256 - static_cast<int64_t>(c.prompts[0].ids.size())});  // what fits
  c = parse_chat({{"messages", kHello}, {"logprobs", true}, {"top_logprobs", 3}});
  EXPECT_EQ(c.logprobs, 3);
  EXPECT_EQ(parse_chat({{"messages", kHello}, {"logprobs", false}}).logprobs, -1);
  // Fields that would change the output: refused by name, never ignored.
  for (const char* key : {"tools", "functions", "response_format", "chat_template", "guided_json"}) {
    const json value = std::string(key) == "response_format" ? json{{"type", "json_object"}}
                       : std::string(key) == "tools"         ? json::array({{{"type", "function"}}})
                                                             : json("x");
    const auto [why, param] = chat_refusal({{"messages", kHello}, {key, value}});
    EXPECT_EQ(param, key) << why;
    EXPECT_NE(why.find("is not supported by linnet serve"), std::string::npos) << why;
  }
  EXPECT_EQ(chat_refusal({{"messages", kHello}, {"response_format", {{"type", "text"}}}}).first, "");
  EXPECT_EQ(chat_refusal({{"messages", kHello}, {"tool_choice", "none"}}).first, "");
  EXPECT_EQ(chat_refusal({{"messages", kHello}, {"presence_penalty", 3}}).second, "presence_penalty");  // past [-2, 2]
  EXPECT_EQ(chat_refusal({{"messages", kHello}, {"use_beam_search", true}}).second, "use_beam_search");
  EXPECT_EQ(chat_refusal({{"messages", kHello}, {"logprobs", 2}}).first,
            "`logprobs` must be true or false in a chat request (`top_logprobs` says how many likeliest tokens), got 2");
  EXPECT_EQ(chat_refusal({{"messages", kHello}, {"top_logprobs", 2}}).first, "`top_logprobs` needs `logprobs`: true");
  EXPECT_EQ(chat_refusal({{"messages", kHello}, {"max_tokens", 0}}).first, "`max_tokens` must be a positive integer, got 0");
  EXPECT_EQ(chat_refusal({{"messages", kHello}, {"max_tokens", 1000}}).first,
            "the conversation (" + std::to_string(tok().encode(kHelloText, false).size()) +
                " tokens) + max_tokens (1000) = " + std::to_string(tok().encode(kHelloText, false).size() + 1000) +
                " exceeds MaxSeq = 256 (raise --max-seq or lower max_tokens)");
  // The template's raise_exception is the 400's message.
  EXPECT_EQ(chat_refusal({{"messages", {{{"role", "robot"}, {"content", "x"}}}}}),
            std::make_pair(std::string("Unknown role: robot"), std::string("messages")));
  // A model without a chat template says so.
  EXPECT_EQ(chat_refusal({{"messages", kHello}}, served(nullptr)).first, "this model has no chat template");
  try {
    parse_chat({{"messages", kHello}, {"model", "other"}});
    ADD_FAILURE() << "another model's name accepted";
  } catch (const serve::ApiError& e) {
    EXPECT_EQ(e.status(), 404);
  }
}

// A body of 60,000 chat_template_kwargs (1 MB) is read, checked and rendered in linear time
// (issue 34 item 5; before: 4.8 s to parse its keys in order, 37 s of CPU in all).
TEST(ServeChat, ABodyWithManyKeysTakesLinearTime) {
  std::string kwargs = "{";
  for (int i = 0; i < 60000; ++i) kwargs += str(i ? "," : "", "\"k", i, "\":", i);
  const std::string text = R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "chat_template_kwargs": )" +
                           kwargs + "}}";
  const auto start = std::chrono::steady_clock::now();
  const json body = json::parse(text);
  const ojson ordered = parse_ordered_json(text, "the request body");
  const auto p = serve::parse_request("/v1/chat/completions", body, ordered, tok(), served());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0 * linnet::testing::kSlowdown);
  ASSERT_EQ(p.prompts.size(), 1u);
  EXPECT_EQ(p.prompts[0].text,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

// The server's cancel check reaches the chat template's render (parse_request's last
// argument): a client that went away stops it within a few thousand steps, a 499 nobody reads
// (issue 34 item 5; before: the render went on to its end).
TEST(ServeChat, ARenderStopsWhenTheClientIsGone) {
  const ChatTemplate slow = ChatTemplate::single(
      "{% for i in range(100000) %}{% for m in messages %}{% endfor %}{% endfor %}{{ messages[0].content }}", ojson::object());
  const json body = {{"messages", kHello}, {"max_tokens", 4}};
  const ojson ordered = ojson::parse(body.dump());
  int polls = 0;
  try {
    serve::parse_request("/v1/chat/completions", body, ordered, tok(), served(&slow), [&polls] { return ++polls == 2; });
    ADD_FAILURE() << "not cancelled";
  } catch (const serve::ApiError& e) {
    EXPECT_EQ(e.status(), 499) << e.what();
  }
  EXPECT_EQ(polls, 2);
  polls = 0;
  try {
    serve::tokenize_body(body, ordered, tok(), served(&slow), [&polls] { return ++polls == 1; });
    ADD_FAILURE() << "not cancelled";
  } catch (const serve::ApiError& e) {
    EXPECT_EQ(e.status(), 499) << e.what();
  }
  // A client still there: the same request is answered, the check asked all along.
  polls = 0;
  const auto p = serve::parse_request("/v1/chat/completions", body, ordered, tok(), served(&slow), [&polls] {
    ++polls;
    return false;
  });
  EXPECT_GT(polls, 10);
  ASSERT_EQ(p.prompts.size(), 1u);
  EXPECT_EQ(p.prompts[0].text, "Be brief.");
}

// A render past its limits is the request's fault: a 400 naming the limit.
TEST(ServeChat, ARenderPastItsLimitsIsA400) {
  const ChatTemplate huge = ChatTemplate::single("{{ messages[0].content | indent(10**9, true) }}", ojson::object());
  const auto [why, param] = chat_refusal({{"messages", kHello}}, served(&huge));
  EXPECT_EQ(param, "messages");
  EXPECT_EQ(why, "the chat template failed on this conversation: line 1: the template would make a text of more than 64 MiB "
                 "(the render limit max_bytes)");
  const ChatTemplate deep = ChatTemplate::single("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ojson::object());
  EXPECT_EQ(chat_refusal({{"messages", kHello}}, served(&deep)).first,
            "the chat template failed on this conversation: line 1: maximum recursion depth exceeded");
}

TEST(ServeChat, ResponseShapes) {
  auto c = parse_chat({{"messages", kHello}, {"logprobs", true}, {"top_logprobs", 2}, {"n", 2}});
  serve::ChoiceResult r;
  r.tokens = {5, 4};
  r.text = "x";
  r.finish_reason = "stop";
  const size_t n = c.prompts[0].ids.size();
  r.token_logprobs.assign(n + 1, -9.0f);
  r.token_logprobs[n - 1] = -0.5f;
  r.token_logprobs[n] = -0.25f;
  r.top.assign(n + 1, {});
  r.top[n - 1] = {{7, -1.5f}, {5, -0.5f}};
  const json body = serve::completion_body("chatcmpl-1", 7, "tiny", c, {r, r}, tok());
  EXPECT_EQ(body["object"], "chat.completion");
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["choices"][0]["message"], (json{{"role", "assistant"}, {"content", "x"}}));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"], (json{{"prompt_tokens", n}, {"completion_tokens", 4}, {"total_tokens", n + 4}}));
  const json& lp = body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 2u);  // each generated token, EOS (<|eot_id|>) too
  EXPECT_EQ(lp[0]["token"], serve::token_text(tok(), 5));
  EXPECT_FLOAT_EQ(lp[0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(lp[0]["top_logprobs"].size(), 2u);
  EXPECT_FLOAT_EQ(lp[0]["top_logprobs"][0]["logprob"].get<float>(), -0.5f);  // likeliest first
  EXPECT_EQ(lp[1]["token"], "<|eot_id|>");
  EXPECT_EQ(lp[1]["bytes"].size(), std::string("<|eot_id|>").size());
  const json chunk = serve::chat_chunk("chatcmpl-1", 7, "tiny", 1, {{"content", "y"}}, nullptr, nullptr);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"], (json{{"content", "y"}}));
  EXPECT_EQ(serve::response_id(c, 3), "chatcmpl-3");
}

TEST(ServeChat, TokenizeAndDetokenizeAsVllm) {
  const serve::ServedModel m = served();
  json t = serve::tokenize_body({{"prompt", "Hi there"}}, ojson(), tok(), m);
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), tok().encode("Hi there", true));  // add_special_tokens: BOS
  EXPECT_EQ(t["count"], t["tokens"].size());
  EXPECT_EQ(t["max_model_len"], 256);
  EXPECT_TRUE(t["token_strs"].is_null());
  t = serve::tokenize_body({{"prompt", "Hi there"}, {"add_special_tokens", false}, {"return_token_strs", true}}, ojson(),
                           tok(), m);
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), tok().encode("Hi there", false));
  EXPECT_EQ(t["token_strs"].size(), t["tokens"].size());
  const json chat_body = {{"messages", kHello}};
  t = serve::tokenize_body(chat_body, ojson::parse(chat_body.dump()), tok(), m);
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), tok().encode(kHelloText, false));
  EXPECT_EQ(serve::detokenize_body({{"tokens", tok().encode(kHelloText, false)}}, tok(), m)["prompt"], kHelloText);
  EXPECT_EQ(serve::detokenize_body({{"tokens", json::array()}}, tok(), m)["prompt"], "");
  try {
    serve::detokenize_body({{"tokens", {1, 5000}}}, tok(), m);
    ADD_FAILURE() << "5000 accepted";
  } catch (const serve::ApiError& e) {
    EXPECT_EQ(std::string(e.what()), "`tokens[1]` = 5000 is not a token id in [0, Vocab=1398)");
  }
  try {
    serve::tokenize_body({{"prompt", "x"}, {"messages", kHello}}, ojson(), tok(), m);
    ADD_FAILURE() << "both accepted";
  } catch (const serve::ApiError& e) {
    EXPECT_EQ(std::string(e.what()), "give one of `prompt` (a text) and `messages` (a conversation)");
  }
}

TEST(ChatCli, ApplyChatTemplatePrintsTheTextExactly) {
  const fs::path d = fresh_dir("apply");
  write_text(d / "msgs.json", json(kHello).dump());
  const std::string ckpt = chat_model().string();
  auto r = linnet_run({"apply-chat-template", "--checkpoint", ckpt, "--messages", (d / "msgs.json").string()});
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(r.output, kHelloText);  // exactly: no newline added
  r = linnet_run({"apply-chat-template", "--checkpoint", ckpt, "--messages", (d / "msgs.json").string(), "--ids"});
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  std::string ids;
  for (int32_t id : tok().encode(kHelloText, false)) ids += (ids.empty() ? "" : " ") + std::to_string(id);
  EXPECT_EQ(r.output, ids + "\n");
  r = linnet_run({"apply-chat-template", "--checkpoint", ckpt, "--messages", (d / "msgs.json").string(),
                  "--no-generation-prompt", "--kwargs", R"({"enable_thinking": false})"});
  EXPECT_EQ(r.output, kHelloText.substr(0, kHelloText.rfind("<|start_header_id|>")) + "(no thinking)") << r.errors;
  // Another template, from a file; one that does not parse is named with its line and column.
  write_text(d / "parts.jinja", kPartsTemplate);
  r = linnet_run({"apply-chat-template", "--checkpoint", ckpt, "--messages", (d / "msgs.json").string(), "--template",
                  (d / "parts.jinja").string()});
  EXPECT_EQ(r.output, "[system]Be brief.[user]Hi there") << r.errors;
  write_text(d / "bad.jinja", "line one\n{% for m in messages %}{{ m.content }\n");
  r = linnet_run({"apply-chat-template", "--checkpoint", ckpt, "--messages", (d / "msgs.json").string(), "--template",
                  (d / "bad.jinja").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.errors.find("bad.jinja: the chat template does not parse: line 2, column"), std::string::npos) << r.errors;
  // A bad conversation: the file and what is wrong.
  write_text(d / "bad.json", R"([{"role": "user", "content": "x"}, {"content": "y"}])");
  r = linnet_run({"apply-chat-template", "--checkpoint", ckpt, "--messages", (d / "bad.json").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.errors.find("bad.json: `messages[1].role` must be a string"), std::string::npos) << r.errors;
  write_text(d / "robot.json", R"([{"role": "robot", "content": "x"}])");
  r = linnet_run({"apply-chat-template", "--checkpoint", ckpt, "--messages", (d / "robot.json").string()});
  EXPECT_NE(r.errors.find("robot.json: Unknown role: robot"), std::string::npos) << r.errors;
  // --tools: rendered as transformers renders them, the keys in the order written.
  write_text(d / "tools.jinja", "{{ tools | tojson }}|{{ messages[0] | tojson }}");
  write_text(d / "tools.json", R"([{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}])");
  write_text(d / "ordered.json", R"([{"role": "user", "zeta": 1, "content": "x", "alpha": 2}])");
  r = linnet_run({"apply-chat-template", "--checkpoint", ckpt, "--messages", (d / "ordered.json").string(), "--tools",
                  (d / "tools.json").string(), "--template", (d / "tools.jinja").string()});
  EXPECT_EQ(r.output, R"([{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}]|)"
                      R"({"role": "user", "zeta": 1, "content": "x", "alpha": 2})") << r.errors;
  // --template NAME: one of the checkpoint's named templates; this one has a single template.
  r = linnet_run({"apply-chat-template", "--checkpoint", ckpt, "--messages", (d / "msgs.json").string(), "--template",
                  "tool_use"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.errors.find("no chat template named 'tool_use': this tokenizer has a single chat template"),
            std::string::npos) << r.errors;
  // A hostile template is an error, never a crash (issue 34 item 6; before: printing a list
  // nested 20,000 deep overflowed the stack, exit 139) or a run that eats the memory (item 7).
  write_text(d / "deep.jinja", "{% set ns = namespace(x=[]) %}{% for i in range(20000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}");
  r = linnet_run({"apply-chat-template", "--checkpoint", ckpt, "--messages", (d / "msgs.json").string(), "--template",
                  (d / "deep.jinja").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.errors.find("maximum recursion depth exceeded while getting the repr of an object"), std::string::npos) << r.errors;
  write_text(d / "indent.jinja", "{{ 'a\nb' | indent(10**9) }}");
  r = linnet_run({"apply-chat-template", "--checkpoint", ckpt, "--messages", (d / "msgs.json").string(), "--template",
                  (d / "indent.jinja").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.errors.find("the template would make a text of more than 64 MiB (the render limit max_bytes)"),
            std::string::npos) << r.errors;
}

// A checkpoint without a chat template: what to give instead, as the server says it (issue 35).
TEST(ChatCli, ApplyChatTemplateWithoutOneSaysToGiveOne) {
  const fs::path d = fresh_dir("apply-none");
  write_text(d / "msgs.json", json(kHello).dump());
  const fs::path plain = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval/model";
  auto r = linnet_run({"apply-chat-template", "--checkpoint", plain.string(), "--messages", (d / "msgs.json").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.errors.find(plain.string() + ": no chat template (none in tokenizer_config.json"), std::string::npos)
      << r.errors;
  EXPECT_NE(r.errors.find("; give one with --template FILE"), std::string::npos) << r.errors;
  write_text(d / "t.jinja", kTemplate);
  r = linnet_run({"apply-chat-template", "--checkpoint", plain.string(), "--messages", (d / "msgs.json").string(),
                  "--template", (d / "t.jinja").string()});
  EXPECT_EQ(r.exit_code, 0) << r.errors;
}

TEST(ChatCli, GenerateTakesMessagesLines) {
  const fs::path d = fresh_dir("generate");
  const std::string ckpt = chat_model().string();
  json tokens = tok().encode(kHelloText, false);
  write_text(d / "in.jsonl", json{{"id", "chat"}, {"messages", kHello}, {"max_new_tokens", 6}}.dump() + "\n" +
                            json{{"id", "ids"}, {"tokens", tokens}, {"max_new_tokens", 6}}.dump() + "\n" +
                            json{{"id", "robot"}, {"messages", {{{"role", "robot"}, {"content", "x"}}}}}.dump() + "\n" +
                            json{{"id", "sampled"}, {"messages", kHello}, {"temperature", 1}, {"seed", 5},
                                 {"chat_template_kwargs", {{"enable_thinking", false}}}}.dump() + "\n");
  auto r = linnet_run({"generate", "--checkpoint", ckpt, "--prompts", (d / "in.jsonl").string(), "--output",
                       (d / "out.jsonl").string(), "--backend", "cpu", "--max-new-tokens", "6"});
  EXPECT_EQ(r.exit_code, 3) << r.errors;  // the robot's line failed; the others ran
  const auto out = read_jsonl(d / "out.jsonl");
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0]["tokens"], out[1]["tokens"]);  // a conversation is its rendered ids
  EXPECT_EQ(out[0]["prompt_tokens"], tokens.size());
  EXPECT_EQ(out[2]["error"], (d / "in.jsonl").string() + ":3: Unknown role: robot");
  EXPECT_TRUE(out[3].contains("tokens"));
  // A malformed conversation is an error line too, named by line and index; the others run.
  write_text(d / "bad.jsonl", json{{"id", "x"}, {"messages", {{{"role", 1}}}}}.dump() + "\n" +
                             json{{"id", "ok"}, {"messages", kHello}}.dump() + "\n");
  r = linnet_run({"generate", "--checkpoint", ckpt, "--prompts", (d / "bad.jsonl").string(), "--output",
                  (d / "bad-out.jsonl").string(), "--backend", "cpu", "--max-new-tokens", "2"});
  EXPECT_EQ(r.exit_code, 3) << r.errors;
  const auto bad = read_jsonl(d / "bad-out.jsonl");
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_EQ(bad[0]["error"], (d / "bad.jsonl").string() + ":1: `messages[0].role` must be a string (\"system\", "
                                                          "\"user\", \"assistant\", …), got 1");
  EXPECT_EQ(bad[1]["completion_tokens"], 2);
  // A chat key on a line that is not a conversation is a bad line (--on-error).
  write_text(d / "mixed.jsonl", json{{"id", "y"}, {"text", "hi"}, {"chat_template_kwargs", json::object()}}.dump() + "\n");
  r = linnet_run({"generate", "--checkpoint", ckpt, "--prompts", (d / "mixed.jsonl").string(), "--output",
                  (d / "mixed-out.jsonl").string(), "--backend", "cpu", "--max-new-tokens", "2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.errors.find("mixed.jsonl:1: \"chat_template_kwargs\" goes with \"messages\""), std::string::npos) << r.errors;
  // A checkpoint without a chat template: the line says so and what to do.
  const fs::path plain = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval/model";
  r = linnet_run({"generate", "--checkpoint", plain.string(), "--prompts", (d / "in.jsonl").string(), "--output",
                  (d / "plain.jsonl").string(), "--backend", "cpu", "--max-new-tokens", "2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.errors.find("this line is a conversation (\"messages\"), but this model has no chat template"),
            std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("--chat-template FILE"), std::string::npos) << r.errors;
  // --chat-template gives it one.
  write_text(d / "t.jinja", kTemplate);
  r = linnet_run({"generate", "--checkpoint", plain.string(), "--prompts", (d / "in.jsonl").string(), "--output",
                  (d / "plain.jsonl").string(), "--backend", "cpu", "--max-new-tokens", "2", "--chat-template",
                  (d / "t.jinja").string(), "--overwrite"});
  EXPECT_EQ(r.exit_code, 3) << r.errors;
  write_text(d / "broken.jinja", "{% if %}");
  r = linnet_run({"generate", "--checkpoint", plain.string(), "--prompts", (d / "in.jsonl").string(), "--output",
                  (d / "plain.jsonl").string(), "--backend", "cpu", "--chat-template", (d / "broken.jinja").string(),
                  "--overwrite"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.errors.find("broken.jinja: --chat-template does not parse: line 1, column"), std::string::npos) << r.errors;
}

namespace {
std::string batch_file() {
  auto line = [](const json& j) { return j.dump() + "\n"; };
  std::string s;
  s += line({{"custom_id", "chat-greedy"}, {"method", "POST"}, {"url", "/v1/chat/completions"},
             {"body", {{"model", "tiny"}, {"messages", kHello}, {"max_tokens", 8}, {"temperature", 0}}}});
  s += line({{"custom_id", "chat-sampled"}, {"method", "POST"}, {"url", "/v1/chat/completions"},
             {"body", {{"messages", kHello}, {"max_completion_tokens", 6}, {"seed", 3}, {"n", 2}, {"logprobs", true},
                       {"top_logprobs", 2}}}});
  s += line({{"custom_id", "text"}, {"method", "POST"}, {"url", "/v1/completions"},
             {"body", {{"prompt", "The cat sat"}, {"max_tokens", 5}, {"temperature", 0}, {"stop", "e"}}}});
  s += line({{"custom_id", "ids-echo"}, {"method", "POST"}, {"url", "/v1/completions"},
             {"body", {{"prompt", {0, 5, 6}}, {"max_tokens", 2}, {"temperature", 0}, {"echo", true}, {"logprobs", 1}}}});
  s += line({{"custom_id", "robot"}, {"method", "POST"}, {"url", "/v1/chat/completions"},
             {"body", {{"messages", {{{"role", "robot"}, {"content", "x"}}}}}}});
  s += line({{"custom_id", "tools"}, {"method", "POST"}, {"url", "/v1/chat/completions"},
             {"body", {{"messages", kHello}, {"tools", json::array({{{"type", "function"}}})}}}});
  s += line({{"custom_id", "embed"}, {"method", "POST"}, {"url", "/v1/embeddings"}, {"body", {{"input", "x"}}}});
  s += line({{"custom_id", "get"}, {"method", "GET"}, {"url", "/v1/completions"}, {"body", {{"prompt", "x"}}}});
  s += "{\"custom_id\": \"cut\", \"method\": \"POST\"\n";
  s += line({{"method", "POST"}, {"url", "/v1/completions"}, {"body", {{"prompt", "x"}}}});
  s += line({{"custom_id", "text"}, {"method", "POST"}, {"url", "/v1/completions"}, {"body", {{"prompt", "again"}}}});
  s += line({{"custom_id", "stream"}, {"method", "POST"}, {"url", "/v1/completions"},
             {"body", {{"prompt", "x"}, {"stream", true}}}});
  s += line({{"custom_id", "other-model"}, {"method", "POST"}, {"url", "/v1/completions"},
             {"body", {{"prompt", "x"}, {"model", "gpt-4o"}}}});
  s += line({{"custom_id", "last"}, {"method", "POST"}, {"url", "/v1/chat/completions"},
             {"body", {{"messages", kHello}, {"max_tokens", 3}, {"temperature", 0.7}}}});
  return s;
}
}  // namespace

// Before: no way to run a batch file; the server's bodies only over HTTP.
TEST(RunBatch, MixedLinesAreAnsweredAsTheServerAnswersAndBadLinesAreErrorLines) {
  const fs::path d = fresh_dir("batch");
  write_text(d / "in.jsonl", batch_file());
  auto r = linnet_run(run_batch_args(d / "in.jsonl", d / "out.jsonl"));
  EXPECT_EQ(r.exit_code, 3) << r.errors;  // some lines failed; every line has its answer
  EXPECT_NE(r.output.find("run-batch: 5 requests answered (9 errors, 0 already done)"), std::string::npos) << r.output;
  const auto out = read_jsonl(d / "out.jsonl");
  ASSERT_EQ(out.size(), 14u);
  std::map<std::string, json> by;
  for (const auto& l : out) by[l["custom_id"].dump()] = l;
  // A chat answer: the body the server answers, its tokens those of generate on the rendered ids.
  const json& greedy = out[0];
  EXPECT_EQ(greedy["custom_id"], "chat-greedy");
  EXPECT_TRUE(greedy["error"].is_null());
  EXPECT_EQ(greedy["response"]["status_code"], 200);
  const json& body = greedy["response"]["body"];
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  write_text(d / "gen.jsonl", json{{"id", "g"}, {"tokens", tok().encode(kHelloText, false)}, {"max_new_tokens", 8}}.dump() + "\n");
  ASSERT_EQ(linnet_run({"generate", "--checkpoint", chat_model().string(), "--prompts", (d / "gen.jsonl").string(),
                        "--output", (d / "gen-out.jsonl").string(), "--backend", "cpu"})
                .exit_code,
            0);
  const json want = read_jsonl(d / "gen-out.jsonl")[0];
  EXPECT_EQ(body["choices"][0]["message"]["content"], want["text"]);
  EXPECT_EQ(body["choices"][0]["finish_reason"], want["finish_reason"]);
  EXPECT_EQ(body["usage"]["completion_tokens"], want["completion_tokens"]);
  // n = 2 with the chat logprobs; a completion with echo; stop strings.
  const json& sampled = out[1]["response"]["body"];
  ASSERT_EQ(sampled["choices"].size(), 2u);
  EXPECT_EQ(sampled["choices"][1]["logprobs"]["content"].size(), sampled["usage"]["completion_tokens"].get<size_t>() / 2);
  EXPECT_EQ(out[3]["response"]["body"]["choices"][0]["logprobs"]["tokens"].size(), 5u);
  // Errors: refused as the server refuses (status, body, error), or not a request (no response).
  EXPECT_EQ(out[4]["response"]["status_code"], 400);
  EXPECT_EQ(out[4]["response"]["body"]["error"]["message"], "Unknown role: robot");
  EXPECT_EQ(out[4]["error"]["message"], "Unknown role: robot");
  EXPECT_EQ(out[5]["error"]["param"], "tools");
  EXPECT_TRUE(out[6]["response"].is_null());
  EXPECT_NE(out[6]["error"]["message"].get<std::string>().find("in.jsonl:7: \"url\" must be \"/v1/completions\" or"),
            std::string::npos);
  EXPECT_NE(out[7]["error"]["message"].get<std::string>().find("\"method\" must be \"POST\""), std::string::npos);
  EXPECT_EQ(out[8]["custom_id"], 9);  // no custom_id to be had: the line number stands for it
  EXPECT_NE(out[8]["error"]["message"].get<std::string>().find("in.jsonl:9: malformed JSON"), std::string::npos);
  EXPECT_EQ(out[9]["custom_id"], 10);
  EXPECT_NE(out[9]["error"]["message"].get<std::string>().find("\"custom_id\" is required"), std::string::npos);
  EXPECT_EQ(out[10]["custom_id"], 11);
  EXPECT_NE(out[10]["error"]["message"].get<std::string>().find("custom_id \"text\" is already the custom_id of line 3"),
            std::string::npos);
  EXPECT_EQ(out[11]["error"]["param"], "stream");
  EXPECT_EQ(out[12]["response"]["status_code"], 404);
  EXPECT_TRUE(out[13]["error"].is_null());
  // Deterministic: the same file again gives the same answers (no seed: seed 0).
  r = linnet_run(run_batch_args(d / "in.jsonl", d / "again.jsonl"));
  const auto again = read_jsonl(d / "again.jsonl");
  ASSERT_EQ(again.size(), out.size());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(comparable(again[i]), comparable(out[i])) << i;
}

TEST(RunBatch, ResumeByCustomIdAndTheOutputPolicy) {
  const fs::path d = fresh_dir("batch_resume");
  write_text(d / "in.jsonl", batch_file());
  ASSERT_EQ(linnet_run(run_batch_args(d / "in.jsonl", d / "whole.jsonl")).exit_code, 3);
  const auto whole = read_jsonl(d / "whole.jsonl");
  // A non-empty output is refused without --resume or --overwrite.
  write_text(d / "out.jsonl", whole[0].dump() + "\n");
  auto r = linnet_run(run_batch_args(d / "in.jsonl", d / "out.jsonl"));
  EXPECT_EQ(r.exit_code, 2) << r.errors;
  EXPECT_NE(r.errors.find("out.jsonl already holds results: give --resume"), std::string::npos) << r.errors;
  // --resume: what is there is kept (an error line runs again), the rest answered, in input order.
  const std::string kept = whole[0].dump() + "\n" + whole[4].dump() + "\n" + whole[13].dump() + "\n" +
                           whole[2].dump().substr(0, 40);  // a line a kill cut off
  write_text(d / "out.jsonl", kept);
  r = linnet_run(run_batch_args(d / "in.jsonl", d / "out.jsonl", {"--resume"}));
  EXPECT_EQ(r.exit_code, 3) << r.errors;
  EXPECT_NE(r.errors.find("the last line is incomplete"), std::string::npos) << r.errors;
  EXPECT_NE(r.output.find("(9 errors, 2 already done)"), std::string::npos) << r.output;
  const auto resumed = read_jsonl(d / "out.jsonl");
  ASSERT_EQ(resumed.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(comparable(resumed[i]), comparable(whole[i])) << i;
  EXPECT_EQ(resumed[0], whole[0]);  // kept as it was
}

TEST(RunBatch, TheSameAnswersOnTwoRanksAsShardsAndAsReplicas) {
  if (linnet::testing::find_mpirun().empty()) GTEST_SKIP() << "mpirun not found";
  const fs::path d = fresh_dir("batch_ranks");
  write_text(d / "in.jsonl", batch_file());
  ASSERT_EQ(linnet_run(run_batch_args(d / "in.jsonl", d / "one.jsonl")).exit_code, 3);
  const auto one = read_jsonl(d / "one.jsonl");
  for (const char* tp : {"2", "1"}) {
    SCOPED_TRACE(std::string("--tp ") + tp);
    const fs::path out = d / (std::string("tp") + tp + ".jsonl");
    const auto r = linnet_run(run_batch_args(d / "in.jsonl", out, {"--tp", tp, "--threads", "1"}), 300, 2);
    EXPECT_EQ(r.exit_code, 3) << r.errors;
    const auto two = read_jsonl(out);
    ASSERT_EQ(two.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      json a = comparable(one[i]), b = comparable(two[i]);
      // Log-probabilities over two vocab shards are summed in another order: equal to 1e-5.
      if (a["response"].is_object() && a["response"]["body"].contains("choices"))
        for (size_t c = 0; c < a["response"]["body"]["choices"].size(); ++c) {
          json& la = a["response"]["body"]["choices"][c]["logprobs"];
          json& lb = b["response"]["body"]["choices"][c]["logprobs"];
          if (!la.is_object() || !la.contains("content")) continue;
          for (size_t k = 0; k < la["content"].size(); ++k) {
            EXPECT_NEAR(la["content"][k]["logprob"].get<double>(), lb["content"][k]["logprob"].get<double>(), 1e-5);
            la["content"][k].erase("logprob"), lb["content"][k].erase("logprob");
            la["content"][k].erase("top_logprobs"), lb["content"][k].erase("top_logprobs");
          }
        }
      if (i == 3) {  // the echo completion's text-completion logprobs
        auto& la = a["response"]["body"]["choices"][0]["logprobs"];
        auto& lb = b["response"]["body"]["choices"][0]["logprobs"];
        for (size_t k = 1; k < la["token_logprobs"].size(); ++k)
          EXPECT_NEAR(la["token_logprobs"][k].get<double>(), lb["token_logprobs"][k].get<double>(), 1e-5);
        la.erase("token_logprobs"), lb.erase("token_logprobs"), la.erase("top_logprobs"), lb.erase("top_logprobs");
      }
      EXPECT_EQ(a, b) << i;
    }
  }
}

// ---- issue 35 item 1: every request field on every route ----

#include "engine/request_fields.h"

namespace {
// A body of `route` with one field set to its probe value ("<served name>": this server's).
json probe_body(engine::Route route, const engine::RequestField& f) {
  json body = route == engine::Route::chat ? json{{"messages", kHello}, {"max_tokens", 4}}
                                           : json{{"prompt", "Hello there"}, {"max_tokens", 4}};
  const std::string probe = f.probe;
  body[f.name] = probe == "\"<served name>\"" ? json("tiny") : json::parse(probe);
  if (std::string(f.name) == "min_tokens" || std::string(f.name) == "best_of") body["n"] = 1;
  if (route == engine::Route::chat && std::string(f.name) == "top_logprobs") body["logprobs"] = true;
  if (route == engine::Route::chat && std::string(f.name) == "logprobs") body["logprobs"] = true;
  if (std::string(f.name) == "tool_choice" || std::string(f.name) == "function_call") body.erase("tools");
  return body;
}
}  // namespace

// Before: stop_token_ids, truncate_prompt_tokens, prompt_logprobs, use_beam_search,
// return_tokens_as_token_ids, length_penalty, priority and request_id were silently ignored on
// both routes; response_format, guided_json, include_stop_str_in_output and
// skip_special_tokens: false silently accepted by /v1/completions. Now each field of the table
// (engine/request_fields.cpp) is honoured, accepted (without effect, said why), refused by name,
// or — not a field of the route — ignored with one warning; generate lines refuse what they
// do not know.
TEST(RequestFields, EveryFieldOnEveryRoute) {
  size_t walked = 0;
  for (const engine::Route route : {engine::Route::completions, engine::Route::chat}) {
    for (const auto& f : engine::request_fields()) {
      SCOPED_TRACE(::testing::Message() << engine::route_name(route) << " " << f.name);
      if (std::string(f.name) == "prompt" || std::string(f.name) == "messages") continue;  // every body has its own
      const json body = probe_body(route, f);
      const std::string path = route == engine::Route::chat ? "/v1/chat/completions" : "/v1/completions";
      std::string why, param;
      try {
        serve::parse_request(path, body, ojson::parse(body.dump()), tok(), served());
      } catch (const serve::ApiError& e) {
        why = e.what();
        param = e.param();
      }
      switch (f.on(route)) {
        case engine::Handling::honoured:
        case engine::Handling::accepted:
          EXPECT_EQ(why, "") << "probe " << f.probe;
          break;
        case engine::Handling::refused:
          EXPECT_EQ(param, f.name) << why;
          break;
        case engine::Handling::absent:
          EXPECT_EQ(why, "");
          EXPECT_EQ(engine::warn_unknown_fields(body, route), std::vector<std::string>{f.name});
          break;
      }
      ++walked;
    }
  }
  EXPECT_GT(walked, 120u);
  // Generate lines: one line per field; the fields of the route run, the others are refused by name.
  const fs::path d = fresh_dir("fields_walk");
  std::vector<const engine::RequestField*> fields;
  {
    std::ofstream in(d / "in.jsonl");
    for (const auto& f : engine::request_fields()) {
      const std::string n = f.name;
      if (n == "id" || n == "text" || n == "tokens" || n == "messages") continue;
      json line = {{"id", n}, {"max_new_tokens", 4}};
      const bool chat_key = n == "chat_template_kwargs" || n == "add_generation_prompt" || n == "continue_final_message" ||
                            n == "documents" || n == "reasoning_effort";
      if (chat_key) line["messages"] = n == "continue_final_message"
                                           ? json::array({kHello[1], {{"role", "assistant"}, {"content", "Hi"}}})
                                           : kHello;
      else line["text"] = "Hello there";
      line[n] = std::string(f.probe) == "\"<served name>\"" ? json("tiny") : json::parse(f.probe);
      in << line.dump() << "\n";
      fields.push_back(&f);
    }
  }
  const auto r = linnet_run({"generate", "--checkpoint", chat_model().string(), "--prompts", (d / "in.jsonl").string(),
                             "--output", (d / "out.jsonl").string(), "--backend", "cpu", "--on-error", "skip"});
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.errors;
  const auto out = read_jsonl(d / "out.jsonl");
  ASSERT_EQ(out.size(), fields.size());
  for (size_t i = 0; i < fields.size(); ++i) {
    SCOPED_TRACE(fields[i]->name);
    const bool error = out[i].contains("error");
    if (fields[i]->generate_line == engine::Handling::absent) {
      EXPECT_TRUE(error) << out[i].dump();
      if (error) {
        EXPECT_NE(out[i]["error"].get<std::string>().find(fields[i]->name), std::string::npos) << out[i].dump();
      }
    } else {
      EXPECT_FALSE(error) << out[i].dump();
    }
  }
}

namespace {
// One run-batch line's response body (the server's) for a completions `body`.
json batch_body(const json& body, const std::string& url = "/v1/completions") {
  const fs::path d = fresh_dir("fields_batch");
  write_text(d / "in.jsonl", json{{"custom_id", "x"}, {"method", "POST"}, {"url", url}, {"body", body}}.dump() + "\n");
  const auto r = linnet_run({"run-batch", "--checkpoint", chat_model().string(), "-i", (d / "in.jsonl").string(), "-o",
                             (d / "out.jsonl").string(), "--backend", "cpu", "--served-model-name", "tiny"});
  EXPECT_EQ(r.exit_code, 0) << r.errors;
  const auto out = read_jsonl(d / "out.jsonl");
  fs::remove_all(d);
  return out.empty() ? json() : out[0]["response"]["body"];
}
}  // namespace

// The honoured fields as vLLM answers them, through run-batch (the server's bodies).
TEST(RequestFields, HonouredAsVllmAnswers) {
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}};
  const json plain = batch_body(base);
  std::vector<int32_t> tokens;  // the greedy completion's ids, as logprobs' "token_id:<id>"
  {
    json b = base;
    b["logprobs"] = 0;
    b["return_tokens_as_token_ids"] = true;
    const json with_ids = batch_body(b);
    for (const json& t : with_ids["choices"][0]["logprobs"]["tokens"]) tokens.push_back(std::stoi(t.get<std::string>().substr(9)));
  }
  ASSERT_EQ(tokens.size(), 8u);
  // stop_token_ids: the answer ends at that id, finish "stop", stop_reason the id.
  json b = base;
  size_t first_new = 1;  // a token that did not come before
  while (first_new < tokens.size() && std::count(tokens.begin(), tokens.begin() + first_new, tokens[first_new])) ++first_new;
  ASSERT_LT(first_new, tokens.size());
  b["stop_token_ids"] = {tokens[first_new]};
  json a = batch_body(b);
  EXPECT_EQ(a["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(a["choices"][0]["stop_reason"], tokens[first_new]);
  EXPECT_EQ(a["usage"]["completion_tokens"], first_new + 1);
  // A stop string and include_stop_str_in_output.
  const std::string text = plain["choices"][0]["text"].get<std::string>();
  std::string stop;  // the text of a token past the first whose text is ASCII (whole characters)
  for (size_t k = 1; k < tokens.size() && stop.empty(); ++k) {
    stop = tok().decode(std::span<const TokenId>(&tokens[k], 1), true);
    if (std::any_of(stop.begin(), stop.end(), [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; })) stop.clear();
  }
  ASSERT_FALSE(stop.empty());
  b = base;
  b["stop"] = stop;
  a = batch_body(b);
  EXPECT_EQ(a["choices"][0]["stop_reason"], stop);
  EXPECT_EQ(a["choices"][0]["text"], text.substr(0, text.find(stop)));
  b["include_stop_str_in_output"] = true;
  EXPECT_EQ(batch_body(b)["choices"][0]["text"], text.substr(0, text.find(stop) + stop.size()));
  // add_special_tokens false: no BOS (one prompt token fewer, the same text otherwise).
  b = base;
  b["add_special_tokens"] = false;
  EXPECT_EQ(batch_body(b)["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"].get<int>() - 1);
  // truncate_prompt_tokens: the last k.
  b = base;
  b["truncate_prompt_tokens"] = 2;
  EXPECT_EQ(batch_body(b)["usage"]["prompt_tokens"], 2);
  // request_id: the response's id.
  b = base;
  b["request_id"] = "job-7";
  EXPECT_EQ(batch_body(b)["id"], "cmpl-job-7");
  // logprobs with return_tokens_as_token_ids, prompt_logprobs with ranks.
  b = base;
  b["logprobs"] = 2;
  b["prompt_logprobs"] = 1;
  b["return_tokens_as_token_ids"] = true;
  a = batch_body(b);
  const json& lp = a["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 8u);
  EXPECT_EQ(lp["tokens"][0], "token_id:" + std::to_string(tokens[0]));
  const json& pl = a["choices"][0]["prompt_logprobs"];
  const auto prompt_ids = tok().encode("Once upon a time", true);
  ASSERT_EQ(pl.size(), prompt_ids.size());
  EXPECT_TRUE(pl[0].is_null());
  for (size_t p = 1; p < pl.size(); ++p) {
    const json& at = pl[p][std::to_string(prompt_ids[p])];
    EXPECT_GE(at["rank"].get<int>(), 1);
    EXPECT_EQ(at["decoded_token"], "token_id:" + std::to_string(prompt_ids[p]));
    EXPECT_LE(pl[p].size(), 2u);  // the token and the likeliest one
    for (const auto& [id, e] : pl[p].items())
      if (e["rank"] == 1) {
        EXPECT_GE(e["logprob"].get<double>(), at["logprob"].get<double>());
      }
  }
  // skip_special_tokens false: a special token's text is in the answer.
  b = base;
  b["logit_bias"] = {{"3", 100}};  // <|end_header_id|> every time
  b["max_tokens"] = 2;
  EXPECT_EQ(batch_body(b)["choices"][0]["text"], "");
  b["skip_special_tokens"] = false;
  EXPECT_EQ(batch_body(b)["choices"][0]["text"], "<|end_header_id|><|end_header_id|>");
  // min_tokens: EOS (and stop strings) wait; a chat answer with EOS biased up still has them.
  json c = {{"messages", kHello}, {"max_tokens", 6}, {"temperature", 0}, {"logit_bias", {{"4", 100}}}};
  EXPECT_EQ(batch_body(c, "/v1/chat/completions")["usage"]["completion_tokens"], 1);
  c["min_tokens"] = 3;
  const json m = batch_body(c, "/v1/chat/completions");
  EXPECT_EQ(m["usage"]["completion_tokens"], 4);
  EXPECT_EQ(m["choices"][0]["finish_reason"], "stop");
}

// docs/serve.md's fields table says what the table in the code says, field for field.
TEST(RequestFields, DocsTableIsTheCodesTable) {
  const std::string doc = slurp(fs::path(LINNET_SOURCE_DIR) / "docs/serve.md");
  auto word = [](engine::Handling h) {
    return h == engine::Handling::honoured ? "honoured" : h == engine::Handling::refused ? "refused"
         : h == engine::Handling::accepted ? "accepted" : "—";
  };
  for (const auto& f : engine::request_fields()) {
    const size_t at = doc.find(str("| `", f.name, "` | "));
    ASSERT_NE(at, std::string::npos) << f.name << " is not in docs/serve.md's table";
    const std::string row = doc.substr(at, doc.find('\n', at) - at);
    size_t from = 0;
    for (engine::Handling h : {f.generate_line, f.completions, f.chat}) {
      from = row.find(str("| ", word(h)), from);
      ASSERT_NE(from, std::string::npos) << row;
      ++from;
    }
  }
}
