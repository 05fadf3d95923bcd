// `linnet serve` without HTTP: request bodies checked as docs/entries.md "Bad input" asks (the
// field, the index, the rule), response shapes, stop-string hold-back, and the front's queue (503
// when full, drain, failure). The real clients are in tests/serve/ (ctest Serve.*).
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/completion_text.h"
#include "serve/access.h"
#include "serve/openai_api.h"
#include "serve/replica_engine.h"
#include "serve/frontend.h"

using namespace linnet;
using namespace linnet::serve;
using nlohmann::json;

namespace {

const Tokenizer& tok() {
  static const auto t = load_tokenizer((std::filesystem::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval/model").string());
  return *t;
}

ServedModel model() {
  ServedModel m;
  m.name = "tiny";
  m.vocab = 1398;
  m.max_seq = 64;
  m.pages = 8;
  m.page_size = 16;
  return m;
}

// The message of the ApiError parse_completion throws for `body` ("" when it accepts it).
std::string refusal(const json& body, int* status = nullptr, std::string* param = nullptr) {
  try {
    parse_completion(body, tok(), model());
  } catch (const ApiError& e) {
    if (status) *status = e.status();
    if (param) *param = e.param();
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ServeApi, PromptsAsTextIdsAndLists) {
  auto c = parse_completion(json{{"prompt", "Hello there"}, {"max_tokens", 4}}, tok(), model());
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_TRUE(c.prompts[0].is_text);
  EXPECT_EQ(c.prompts[0].ids, tok().encode("Hello there", true));  // add_bos: the checkpoint's default
  EXPECT_EQ(c.max_tokens, std::vector<int64_t>{4});
  EXPECT_FLOAT_EQ(c.sampling.temperature, 1.0f);  // OpenAI's default
  c = parse_completion(json{{"prompt", {5, 6, 7}}}, tok(), model());
  EXPECT_EQ(c.prompts[0].ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(c.max_tokens, std::vector<int64_t>{16});  // unset: 16
  c = parse_completion(json{{"prompt", {{5, 6}, {7}}}, {"n", 2}}, tok(), model());
  EXPECT_EQ(c.prompts.size(), 2u);
  EXPECT_EQ(c.n, 2);
  c = parse_completion(json{{"prompt", json::array({"a", "b c"})}}, tok(), model());
  EXPECT_EQ(c.prompts.size(), 2u);
  // Unset max_tokens is cut to what fits in MaxSeq; a given one is checked.
  std::vector<int64_t> sixty(60, 5);
  c = parse_completion(json{{"prompt", sixty}}, tok(), model());
  EXPECT_EQ(c.max_tokens, std::vector<int64_t>{4});
  c = parse_completion(json{{"prompt", std::vector<int64_t>(64, 5)}, {"max_tokens", 0}, {"echo", true}}, tok(), model());
  EXPECT_EQ(c.max_tokens, std::vector<int64_t>{0});
}

TEST(ServeApi, BadRequestsNameTheFieldIndexAndRule) {
  int status = 0;
  std::string param;
  EXPECT_EQ(refusal(json{{"prompt", {{1, 2}, {3, 1398}}}}, &status, &param),
            "`prompt[1][1]` = 1398 is not a token id in [0, Vocab=1398)");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(param, "prompt");
  EXPECT_EQ(refusal(json{{"prompt", {1, -2}}}), "`prompt[1]` = -2 is not a token id in [0, Vocab=1398)");
  EXPECT_EQ(refusal(json{{"prompt", {1, 2.5}}}), "`prompt[1]` = 2.5 is not a token id in [0, Vocab=1398)");
  EXPECT_EQ(refusal(json{{"prompt", json::array()}}),
            "`prompt` must be a string, a list of strings, a list of token ids or a list of such lists");
  EXPECT_EQ(refusal(json{{"prompt", {json::array(), {1}}}}), "`prompt[0]` is an empty list of token ids");
  EXPECT_EQ(refusal(json{{"max_tokens", 3}}), "`prompt` is required");
  EXPECT_EQ(refusal(json::array({1})), "the request body must be a JSON object");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"max_tokens", "3"}}), "`max_tokens` must be a non-negative integer, got \"3\"");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"max_tokens", 18446744073709551615ull}}),
            "`max_tokens` must be a non-negative integer, got 18446744073709551615");
  EXPECT_EQ(refusal(json{{"prompt", {1, 2}}, {"max_tokens", 63}}),
            "the prompt (2 tokens) + max_tokens (63) = 65 exceeds MaxSeq = 64 (raise --max-seq or lower max_tokens)");
  EXPECT_EQ(refusal(json{{"prompt", {{1}, std::vector<int64_t>(65, 1)}}, {"max_tokens", 0}}),
            "prompt[1] (65 tokens) + max_tokens (0) = 65 exceeds MaxSeq = 64 (raise --max-seq or lower max_tokens)");
  // 8 pages of 16: a 64-position request needs 4 of them; a pool of 3 cannot hold it.
  ServedModel small = model();
  small.pages = 3;
  EXPECT_THROW(parse_completion(json{{"prompt", {1}}, {"max_tokens", 60}}, tok(), small), ApiError);
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"temperature", -0.5}}), "`temperature` = -0.5 must be 0 (greedy) or more");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"top_p", 0}}), "`top_p` = 0 must be in (0, 1]");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"top_k", -3}}),
            "`top_k` must be -1 or 0 (off) or a positive integer, got -3");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"n", 17}}), "`n` must be an integer in [1, 16], got 17");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"logprobs", 21}}), "`logprobs` must be an integer in [0, 20], got 21");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"logprobs", true}}),
            "`logprobs` must be an integer (how many likeliest tokens), got a boolean");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"stream", "yes"}}), "`stream` must be true or false, got \"yes\"");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"stop", {"a", ""}}}), "`stop` must be a non-empty string or a list of them");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"seed", -1}}), "`seed` must be a non-negative integer, got -1");
  // What changes the numbers and is not implemented is refused, never ignored.
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"frequency_penalty", 2.5}}), "`frequency_penalty` = 2.5 must be in [-2, 2]");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"logit_bias", {{"99999", 1}}}}),
            "`logit_bias[\"99999\"]` = 99999 is not a token id in [0, Vocab=1398)");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"use_beam_search", true}}),
            "`use_beam_search` is not supported by linnet serve (no beam search)");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"min_tokens", 20}, {"max_tokens", 5}}),
            "`min_tokens` = 20 must not exceed `max_tokens` = 5");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"best_of", 3}}),
            "`best_of` = 3 is not supported by linnet serve (only best_of = n)");
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"presence_penalty", 0}, {"user", "x"}}), "");  // neutral values, unknown keys
  EXPECT_EQ(refusal(json{{"prompt", "hi"}, {"model", "llama"}}, &status), "The model `llama` does not exist; this server serves `tiny`");
  EXPECT_EQ(status, 404);
}

TEST(ServeApi, ResponseShapes) {
  CompletionParams p = parse_completion(json{{"prompt", {0, 5}}, {"echo", true}, {"logprobs", 2}, {"n", 1}}, tok(), model());
  ChoiceResult r;
  r.tokens = {6, 7};
  r.text = tok().decode(std::vector<TokenId>{6, 7}, true);
  r.finish_reason = "length";
  r.token_logprobs = {-1.5f, -2.5f, -0.5f};  // positions 1, 2, 3
  r.top = {{{5, -1.5f}, {9, -2.0f}}, {{8, -1.0f}, {6, -2.5f}}, {{7, -0.5f}}};
  const json body = completion_body("cmpl-1", 7, "tiny", p, {r}, tok());
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(body["usage"]["completion_tokens"], 2);
  EXPECT_EQ(body["usage"]["total_tokens"], 4);
  const json& c = body["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["text"], tok().decode(std::vector<TokenId>{0, 5}, true) + r.text);  // echo: the prompt first
  EXPECT_EQ(c["finish_reason"], "length");
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 4u);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_FLOAT_EQ(lp["token_logprobs"][2].get<float>(), -2.5f);
  EXPECT_EQ(lp["top_logprobs"][2].size(), 2u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  // Without echo: the completion's tokens only.
  p.echo = false;
  const json no_echo = completion_body("cmpl-1", 7, "tiny", p, {r}, tok())["choices"][0];
  EXPECT_EQ(no_echo["text"], r.text);
  EXPECT_EQ(no_echo["logprobs"]["tokens"].size(), 2u);
  EXPECT_FLOAT_EQ(no_echo["logprobs"]["token_logprobs"][0].get<float>(), -2.5f);
  // Bytes that are not UTF-8 never make the JSON throw.
  EXPECT_NO_THROW(dump(json{{"text", std::string("\xff\xfe")}}));
  EXPECT_EQ(ApiError(503, "full").body()["error"]["type"], "ServiceUnavailableError");
}

namespace {
// engine::CompletionText (generate's and serve's one unit) over `text`'s tokens: how much of
// it may be sent while the stop strings could still complete.
size_t releasable(const std::string& text, std::vector<std::string> stop) {
  engine::CompletionText t(tok(), {}, std::move(stop));
  for (int32_t id : tok().encode(text, false)) t.push(id);
  EXPECT_EQ(t.text(), text);
  return t.releasable();
}
}  // namespace

TEST(ServeApi, StopStringsHoldBackWhatCouldStartThem) {
  EXPECT_EQ(releasable("Hello wor", {"world"}), 6u);   // "wor" might become "world"
  EXPECT_EQ(releasable("Hello", {"world"}), 5u);
  EXPECT_EQ(releasable("xyab", {"abc", "bx"}), 2u);    // "ab" (of abc) is the longest end
  EXPECT_EQ(releasable("", {"x"}), 0u);
  EXPECT_EQ(releasable("xyz", {}), 3u);
  // A stop string that appears cuts the text before it, and everything left may go.
  engine::CompletionText t(tok(), {}, {"cat"});
  bool stopped = false;
  for (int32_t id : tok().encode("the cat sat", false)) stopped = stopped || t.push(id);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(t.text(), "the ");
  EXPECT_EQ(t.releasable(), 4u);
}

TEST(ServeFrontend, QueueBoundDrainAndFailure) {
  Frontend f(2, 3);
  std::vector<ServeJob> a(2), b(2);
  auto sa = f.submit(a);
  EXPECT_NE(a[0].id, a[1].id);
  EXPECT_NE(a[0].replica, a[1].replica);  // spread over the replicas
  try {
    f.submit(b);  // 2 waiting + 2 > 3
    FAIL() << "a full queue accepted more";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 503);
    EXPECT_NE(std::string(e.what()).find("the queue is full"), std::string::npos);
  }
  StepPlan plan = f.take_plan(std::chrono::milliseconds(0));
  EXPECT_EQ(plan.jobs.size(), 2u);
  // A replica reports a's first job done: its stream gets the event, and the slot is free.
  StepReport rep;
  rep.replica = a[0].replica;
  rep.events.push_back(JobEvent{a[0].id, {5}, "x", true, "length", "", {}, {}, {}, "", -1});
  f.deliver({rep});
  auto events = sa->wait(std::chrono::milliseconds(100));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "x");
  std::vector<ServeJob> c(2);
  EXPECT_NO_THROW(f.submit(c));
  f.cancel(a);  // a[1] still pending: cancelled in the next plan
  plan = f.take_plan(std::chrono::milliseconds(0));
  EXPECT_EQ(plan.cancels, std::vector<uint64_t>{a[1].id});
  EXPECT_NE(f.metrics_text("tiny").find("linnet_requests_cancelled_total 1\n"), std::string::npos);
  f.drain();
  EXPECT_EQ(f.health(), Health::draining);
  EXPECT_FALSE(f.drained());
  std::vector<ServeJob> d(1);
  EXPECT_THROW(f.submit(d), ApiError);
  f.fail("rank 1 is gone");
  EXPECT_EQ(f.health(), Health::failed);
  EXPECT_TRUE(f.drained());
}

TEST(ServeApi, BearerKeysOnTheV1Routes) {
  EXPECT_TRUE(key_required("/v1/completions"));
  EXPECT_TRUE(key_required("/v1/models/tiny"));
  EXPECT_TRUE(key_required("/v1"));
  for (const char* open : {"/health", "/metrics", "/tokenize", "/detokenize", "/", "/V1/models"})
    EXPECT_FALSE(key_required(open)) << open;
  const std::vector<std::string> keys = {"alpha", "beta-key"};
  EXPECT_TRUE(key_accepted(keys, "Bearer alpha"));
  EXPECT_TRUE(key_accepted(keys, "bearer beta-key"));  // the scheme in any case
  EXPECT_TRUE(key_accepted(keys, "BEARER alpha"));
  for (const char* wrong : {"", "alpha", "Bearer", "Bearer ", "Bearer  alpha", "Bearer alph", "Bearer alphaa", "Bearer ALPHA",
                            "Basic alpha", "Bearer beta", "Bearer alpha ", "Token alpha"})
    EXPECT_FALSE(key_accepted(keys, wrong)) << wrong;
  EXPECT_FALSE(key_accepted({}, "Bearer alpha"));
  EXPECT_FALSE(key_accepted({""}, "Bearer "));  // an empty key never matches
}

namespace {
std::string header(const HeaderList& h, const std::string& name) {
  for (const auto& [k, v] : h)
    if (k == name) return v;
  return "(none)";
}
}  // namespace

// As Starlette's CORSMiddleware (vLLM's) answers: tests/serve/serve_test.py checks the same over HTTP.
TEST(ServeApi, CorsAsStarletteAnswersIt) {
  AccessOptions o;
  EXPECT_FALSE(Cors(o).enabled());
  o.allowed_origins = {"https://a.example"};
  Cors one(o);
  Cors::Answer a = one.preflight("https://a.example", "POST", std::string("Authorization, X-Trace"));
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "OK");
  EXPECT_EQ(header(a.headers, "Access-Control-Allow-Origin"), "https://a.example");
  EXPECT_EQ(header(a.headers, "Vary"), "Origin");
  EXPECT_EQ(header(a.headers, "Access-Control-Allow-Methods"), "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
  EXPECT_EQ(header(a.headers, "Access-Control-Allow-Headers"), "Authorization, X-Trace");  // "*": as asked
  EXPECT_EQ(header(a.headers, "Access-Control-Max-Age"), "600");
  a = one.preflight("https://b.example", "POST", std::nullopt);
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(a.body, "Disallowed CORS origin");
  EXPECT_EQ(header(a.headers, "Access-Control-Allow-Origin"), "(none)");
  EXPECT_EQ(header(one.response_headers("https://a.example", false), "Access-Control-Allow-Origin"), "https://a.example");
  EXPECT_EQ(header(one.response_headers("https://b.example", false), "Access-Control-Allow-Origin"), "(none)");
  // Listed methods and headers: others refused (header names in any case, the safelisted ones always).
  o.allowed_methods = {"GET", "POST"};
  o.allowed_headers = {"Authorization"};
  Cors listed(o);
  a = listed.preflight("https://b.example", "PUT", std::string("x-other"));
  EXPECT_EQ(a.body, "Disallowed CORS origin, method, headers");
  a = listed.preflight("https://a.example", "POST", std::string("authorization, Content-Type"));
  EXPECT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(header(a.headers, "Access-Control-Allow-Headers"),
            "Accept, Accept-Language, Authorization, Content-Language, Content-Type");
  EXPECT_EQ(header(a.headers, "Access-Control-Allow-Methods"), "GET, POST");
  // Any origin: "*", unless credentials (or cookies) ask for the origin by name.
  o = AccessOptions{};
  o.allowed_origins = {"*"};
  Cors any(o);
  EXPECT_EQ(header(any.preflight("https://z.example", "GET", std::nullopt).headers, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header(any.response_headers("https://z.example", false), "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header(any.response_headers("https://z.example", true), "Access-Control-Allow-Origin"), "https://z.example");
  o.allow_credentials = true;
  Cors credentials(o);
  a = credentials.preflight("https://z.example", "GET", std::nullopt);
  EXPECT_EQ(header(a.headers, "Access-Control-Allow-Origin"), "https://z.example");
  EXPECT_EQ(header(a.headers, "Access-Control-Allow-Credentials"), "true");
  EXPECT_EQ(header(credentials.response_headers("https://z.example", false), "Access-Control-Allow-Credentials"), "true");
}

TEST(ServeApi, LoopbackHosts) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "localhost", "LOCALHOST", "::1", "::ffff:127.0.0.1"})
    EXPECT_TRUE(is_loopback(h)) << h;
  for (const char* h : {"0.0.0.0", "::", "10.0.0.5", "192.168.1.2", "example.org", "128.0.0.1", "::ffff:10.0.0.1", ""})
    EXPECT_FALSE(is_loopback(h)) << h;
}

TEST(ServeApi, ModelCardAsVllmListsIt) {
  ServedModel m = model();
  m.root = "/models/tiny";
  const json card = model_card(m, 1796000000, "modelperm-1");
  EXPECT_EQ(card["id"], "tiny");
  EXPECT_EQ(card["object"], "model");
  EXPECT_EQ(card["created"], 1796000000);
  EXPECT_EQ(card["root"], "/models/tiny");
  EXPECT_TRUE(card["parent"].is_null());
  EXPECT_EQ(card["max_model_len"], 64);
  ASSERT_EQ(card["permission"].size(), 1u);
  EXPECT_EQ(card["permission"][0]["id"], "modelperm-1");
  EXPECT_EQ(card["permission"][0]["object"], "model_permission");
  EXPECT_EQ(card["permission"][0]["allow_logprobs"], true);
  const ApiError e = model_not_found("x", m);
  EXPECT_EQ(e.status(), 404);
  EXPECT_EQ(e.body()["error"]["param"], "model");
}

// vLLM's names beside linnet's, labelled with the model's name (escaped as the format asks).
TEST(ServeApi, MetricsCarryVllmNames) {
  Frontend f(1, 16);
  std::vector<ServeJob> jobs(3);
  jobs[0].prompt = {1, 2, 3};
  jobs[1].prompt = {1};
  jobs[2].prompt = {1};
  f.submit(jobs);
  f.take_plan(std::chrono::milliseconds(0));
  StepReport rep;
  rep.status = ReplicaStatus{1, 0, 3, 12, 2};
  rep.events.push_back(JobEvent{jobs[0].id, {5, 6}, "ab", true, "stop", "", {}, {}, {}, "", -1});
  rep.events.push_back(JobEvent{jobs[1].id, {5}, "a", false, "", "", {}, {}, {}, "", -1});
  f.deliver({rep});
  f.cancel({jobs[2]});
  const std::string text = f.metrics_text("my \"model\"\\x");
  const std::string label = "{model_name=\"my \\\"model\\\"\\\\x\"}";
  for (const std::string& line : std::vector<std::string>{
           "vllm:num_requests_running" + label + " 1", "vllm:num_requests_waiting" + label + " 0",
        "vllm:kv_cache_usage_perc" + label + " 0.25", "vllm:gpu_cache_usage_perc" + label + " 0.25",
        "vllm:num_preemptions_total" + label + " 2", "vllm:prompt_tokens_total" + label + " 5",
        "vllm:generation_tokens_total" + label + " 3",
        "vllm:request_success_total{model_name=\"my \\\"model\\\"\\\\x\",finished_reason=\"stop\"} 1",
        "vllm:request_success_total{model_name=\"my \\\"model\\\"\\\\x\",finished_reason=\"length\"} 0",
        "vllm:request_success_total{model_name=\"my \\\"model\\\"\\\\x\",finished_reason=\"abort\"} 1",
        "vllm:time_to_first_token_seconds_count" + label + " 2", "vllm:e2e_request_latency_seconds_count" + label + " 1",
        "# TYPE vllm:time_per_output_token_seconds histogram", "# TYPE vllm:inter_token_latency_seconds histogram",
        "linnet_generation_tokens_total 3", "linnet_requests_running 1"})
    EXPECT_NE(text.find("\n" + line + "\n"), std::string::npos) << line << "\n" << text;
  // Counters written whole, however large (%g would round them).
  EXPECT_EQ(metric("x_total", "counter", "h", 12345678901234.0), "# HELP x_total h\n# TYPE x_total counter\nx_total 12345678901234\n");
}
