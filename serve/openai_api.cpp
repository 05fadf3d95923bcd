#include "serve/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/error.h"
#include "engine/chat_request.h"
#include "engine/request_fields.h"
#include "engine/request_rules.h"

namespace linnet::serve {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string ApiError::type() const {
  if (!type_.empty()) return type_;
  if (status_ == 404) return "NotFoundError";
  if (status_ == 503) return "ServiceUnavailableError";
  if (status_ >= 500) return "InternalServerError";
  return "BadRequestError";
}

json ApiError::body() const {
  return {{"error",
           {{"message", what()}, {"type", type()}, {"param", param_.empty() ? json(nullptr) : json(param_)},
            {"code", status_}}}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ApiError model_not_found(const std::string& asked, const ServedModel& m) {
  return ApiError(404, str("The model `", asked, "` does not exist; this server serves `", m.name, "`"), "model");
}

json model_card(const ServedModel& m, int64_t created, const std::string& permission_id) {
  const json permission = {{"id", permission_id},
                           {"object", "model_permission"},
                           {"created", created},
                           {"allow_create_engine", false},
                           {"allow_sampling", true},
                           {"allow_logprobs", true},
                           {"allow_search_indices", false},
                           {"allow_view", true},
                           {"allow_fine_tuning", false},
                           {"organization", "*"},
                           {"group", nullptr},
                           {"is_blocking", false}};
  return {{"id", m.name},
          {"object", "model"},
          {"created", created},
          {"owned_by", "linnet"},
          {"root", m.root.empty() ? m.name : m.root},
          {"parent", nullptr},
          {"max_model_len", m.max_seq},
          {"permission", json::array({permission})}};
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& why) { throw ApiError(400, why, param); }

// The chat template's render stopped because the client went away (`cancelled`): 499, as
// nginx names a request closed by its client; nobody reads it.
ApiError client_gone(const jinja::Cancelled& e) { return ApiError(499, str("the client closed the request (", e.what(), ")")); }

using engine::read_boolean;
using engine::read_integer;
using engine::read_number;

// Fields (of either route) that would change the answer and that linnet does not implement:
// refused by name unless they hold their neutral value, never ignored (engine/request_fields.h
// lists them all).
void refuse_unsupported(const json& b) {
  auto set = [&](const char* key) { return b.contains(key) && !b[key].is_null(); };
  if (set("suffix") && b["suffix"] != "") bad("suffix", "`suffix` (insertion) is not supported by linnet serve");
  if (set("best_of") && b["best_of"] != 1 && b["best_of"] != b.value("n", json(1)))
    bad("best_of", str("`best_of` = ", dump(b["best_of"]), " is not supported by linnet serve (only best_of = n)"));
  if (set("use_beam_search") && b["use_beam_search"] != false)
    bad("use_beam_search", "`use_beam_search` is not supported by linnet serve (no beam search)");
  if (set("length_penalty") && !(b["length_penalty"].is_number() && b["length_penalty"].get<double>() == 1))
    bad("length_penalty", str("`length_penalty` = ", dump(b["length_penalty"]),
                              " is not supported by linnet serve (a beam search's; only 1)"));
  if (set("response_format") && b["response_format"] != json{{"type", "text"}})
    bad("response_format", str("`response_format` = ", dump(b["response_format"]),
                               " is not supported by linnet serve (no structured output; only {\"type\": \"text\"})"));
  for (const char* key : {"guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs"})
    if (set(key)) bad(key, str("`", key, "` is not supported by linnet serve: no structured output"));
  if (set("allowed_token_ids")) bad("allowed_token_ids", "`allowed_token_ids` is not supported by linnet serve");
  if (set("logits_processors")) bad("logits_processors", "`logits_processors` are not supported by linnet serve");
  if (set("return_token_ids") && b["return_token_ids"] != false)
    bad("return_token_ids", "`return_token_ids` is not supported by linnet serve");
  if (set("kv_transfer_params")) bad("kv_transfer_params", "`kv_transfer_params` is not supported by linnet serve");
  if (set("vllm_xargs")) bad("vllm_xargs", "`vllm_xargs` is not supported by linnet serve");
  // Checked, with no effect on the answer (engine/request_fields.cpp says why).
  if (set("user") && !b["user"].is_string()) bad("user", "`user` must be a string");
  if (set("metadata") && !b["metadata"].is_object()) bad("metadata", "`metadata` must be an object");
  if (set("store") && !b["store"].is_boolean()) bad("store", "`store` must be true or false");
  if (set("service_tier") && !b["service_tier"].is_string()) bad("service_tier", "`service_tier` must be a string");
  if (set("cache_salt") && !b["cache_salt"].is_string()) bad("cache_salt", "`cache_salt` must be a string");
}

// The fields both routes read alike beside the sampling ones: request_id, prompt_logprobs,
// return_tokens_as_token_ids.
void read_common(const json& b, const ServedModel& m, CompletionParams& c) {
  if (b.contains("request_id") && !b["request_id"].is_null()) {
    if (!b["request_id"].is_string() || b["request_id"].get<std::string>().empty())
      bad("request_id", "`request_id` must be a non-empty string");
    c.request_id = b["request_id"].get<std::string>();
  }
  c.prompt_logprobs = read_integer(b, "prompt_logprobs", 0, m.max_logprobs, -1, str("an integer in [0, ", m.max_logprobs, "]"));
  c.tokens_as_ids = read_boolean(b, "return_tokens_as_token_ids", false);
}

PromptIn text_prompt(const json& v, const std::string& where, const Tokenizer& tok, const ServedModel& m, bool add_bos) {
  PromptIn p;
  p.is_text = true;
  p.text = v.get<std::string>();
  p.ids = engine::encode_text(tok, p.text, add_bos, m.vocab, where);
  if (p.ids.empty()) bad("prompt", str("`", where, "` has no tokens (an empty text and no BOS)"));
  return p;
}

std::vector<PromptIn> prompts(const json& b, const Tokenizer& tok, const ServedModel& m) {
  if (!b.contains("prompt") || b["prompt"].is_null()) bad("prompt", "`prompt` is required");
  // add_special_tokens (default true): the tokenizer's own choice of BOS; false: none.
  const bool add_bos = m.add_bos && read_boolean(b, "add_special_tokens", true);
  const json& p = b["prompt"];
  std::vector<PromptIn> out;
  if (p.is_string()) {
    out.push_back(text_prompt(p, "prompt", tok, m, add_bos));
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    out.push_back(PromptIn{engine::token_ids(p, "prompt", m.vocab), "", false});
  } else if (p.is_array() && !p.empty()) {
    if (static_cast<int64_t>(p.size()) > m.max_prompts)
      bad("prompt", str("`prompt` holds ", p.size(), " prompts; at most ", m.max_prompts, " in one request"));
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string where = str("prompt[", i, "]");
      if (p[i].is_string()) out.push_back(text_prompt(p[i], where, tok, m, add_bos));
      else if (p[i].is_array()) out.push_back(PromptIn{engine::token_ids(p[i], where, m.vocab), "", false});
      else bad("prompt", str("`", where, "` must be a string or a list of token ids, got ", dump(p[i])));
    }
  } else {
    bad("prompt", "`prompt` must be a string, a list of strings, a list of token ids or a list of such lists");
  }
  // truncate_prompt_tokens: each prompt's last k tokens (its text then echoes as decoded).
  for (PromptIn& p : out) {
    const size_t before = p.ids.size();
    engine::truncate_prompt(b, p.ids, m.max_seq);
    if (p.ids.size() != before) p.is_text = false, p.text.clear();
  }
  return out;
}

}  // namespace

namespace {
// A JSON object naming this server's model, if any (404 for another's).
void check_body(const json& b, const ServedModel& m) {
  if (!b.is_object()) bad("", "the request body must be a JSON object");
  if (b.contains("model") && !b["model"].is_null()) {
    if (!b["model"].is_string()) bad("model", "`model` must be a string");
    if (b["model"].get<std::string>() != m.name) throw model_not_found(b["model"].get<std::string>(), m);
  }
}

// The chat fields that would change the output and that linnet does not implement.
void refuse_unsupported_chat(const json& b) {
  auto set = [&](const char* key) { return b.contains(key) && !b[key].is_null(); };
  auto no = [&](const char* key, const std::string& why) {
    if (set(key)) bad(key, str("`", key, "` is not supported by linnet serve: ", why));
  };
  if (set("tools") || set("functions"))
    bad(set("tools") ? "tools" : "functions", str("`", set("tools") ? "tools" : "functions",
        "` is not supported by linnet serve: tool calls are neither rendered nor parsed (leave it out)"));
  if (set("tool_choice") && b["tool_choice"] != "none")
    bad("tool_choice", str("`tool_choice` = ", dump(b["tool_choice"]), " is not supported by linnet serve (no tools)"));
  if (set("function_call") && b["function_call"] != "none")
    bad("function_call", "`function_call` is not supported by linnet serve (no tools)");
  no("chat_template", "a template per request is not accepted; start the server with --chat-template FILE");
  no("prediction", "no predicted outputs");
  no("audio", "linnet serves text");
  if (set("modalities") && b["modalities"] != json::array({"text"}))
    bad("modalities", "`modalities` other than [\"text\"] are not supported: linnet serves text");
  if (set("echo") && b["echo"] != false) bad("echo", "`echo` is not supported for chat by linnet serve");
  if (set("parallel_tool_calls") && !b["parallel_tool_calls"].is_boolean())
    bad("parallel_tool_calls", "`parallel_tool_calls` must be true or false");
}

// The field that says how many tokens a chat answer may have: max_completion_tokens, else the
// older max_tokens (vLLM's order).
const char* chat_max_tokens_key(const json& b) {
  return b.contains("max_completion_tokens") && !b["max_completion_tokens"].is_null() ? "max_completion_tokens"
                                                                                      : "max_tokens";
}
}  // namespace

CompletionParams parse_completion(const json& b, const Tokenizer& tok, const ServedModel& m) try {
  check_body(b, m);
  engine::warn_unknown_fields(b, engine::Route::completions);
  refuse_unsupported(b);
  CompletionParams c;
  read_common(b, m, c);
  c.n = read_integer(b, "n", 1, m.max_n, 1, str("an integer in [1, ", m.max_n, "]"));
  c.stream = read_boolean(b, "stream", false);
  c.echo = read_boolean(b, "echo", false);
  if (b.contains("stream_options") && !b["stream_options"].is_null()) {
    if (!b["stream_options"].is_object()) bad("stream_options", "`stream_options` must be an object");
    c.include_usage = read_boolean(b["stream_options"], "include_usage", false);
  }
  if (b.contains("logprobs") && b["logprobs"].is_boolean()) bad("logprobs", "`logprobs` must be an integer (how many likeliest tokens), got a boolean");
  c.logprobs = read_integer(b, "logprobs", 0, m.max_logprobs, -1, str("an integer in [0, ", m.max_logprobs, "]"));
  engine::SamplingFields sampling;
  sampling.params.temperature = 1.0f;  // the OpenAI default
  sampling = engine::read_sampling(b, sampling, &tok, m.vocab);
  c.sampling = sampling.params;
  c.stop = sampling.stop;
  c.seeded = sampling.seeded;
  c.include_stop_str = sampling.include_stop_str;
  c.skip_special = sampling.skip_special;
  c.prompts = prompts(b, tok, m);
  const bool given = b.contains("max_tokens") && !b["max_tokens"].is_null();
  const int64_t asked = read_integer(b, "max_tokens", 0, std::numeric_limits<int64_t>::max(), 16, "a non-negative integer");
  const engine::PoolLimits pool{m.max_seq, m.page_size, m.pages};
  for (size_t i = 0; i < c.prompts.size(); ++i) {
    const int64_t len = static_cast<int64_t>(c.prompts[i].ids.size());
    const std::string which = c.prompts.size() > 1 ? str("prompt[", i, "]") : std::string("the prompt");
    const int64_t max_new = given ? asked : engine::default_max_new(len, asked, pool);
    if (const std::string why = engine::admission_problem(len, max_new, pool, which, "max_tokens"); !why.empty())
      bad(given || why.find("pages") != std::string::npos ? "max_tokens" : "prompt", why);
    c.max_tokens.push_back(max_new);
    engine::SamplingParams limits = c.sampling;
    limits.max_new_tokens = max_new;
    engine::check_min_tokens(limits, "max_tokens");
  }
  c.sampling.max_new_tokens = asked;
  return c;
} catch (const engine::FieldError& e) {  // the shared request rules: a 400 naming the field
  throw ApiError(400, e.what(), e.field());
}

CompletionParams parse_chat_completion(const json& b, const ojson& ordered, const Tokenizer& tok, const ServedModel& m,
                                       const std::function<bool()>& cancelled) try {
  check_body(b, m);
  engine::warn_unknown_fields(b, engine::Route::chat);
  refuse_unsupported(b);
  refuse_unsupported_chat(b);
  CompletionParams c;
  c.chat = true;
  read_common(b, m, c);
  c.n = read_integer(b, "n", 1, m.max_n, 1, str("an integer in [1, ", m.max_n, "]"));
  c.stream = read_boolean(b, "stream", false);
  if (b.contains("stream_options") && !b["stream_options"].is_null()) {
    if (!b["stream_options"].is_object()) bad("stream_options", "`stream_options` must be an object");
    c.include_usage = read_boolean(b["stream_options"], "include_usage", false);
    if (read_boolean(b["stream_options"], "continuous_usage_stats", false))
      bad("stream_options", "`stream_options.continuous_usage_stats` is not supported by linnet serve");
  }
  if (b.contains("logprobs") && !b["logprobs"].is_null() && !b["logprobs"].is_boolean())
    bad("logprobs", str("`logprobs` must be true or false in a chat request (`top_logprobs` says how many likeliest "
                        "tokens), got ", dump(b["logprobs"])));
  const bool logprobs = read_boolean(b, "logprobs", false);
  const int64_t top = read_integer(b, "top_logprobs", 0, m.max_logprobs, 0, str("an integer in [0, ", m.max_logprobs, "]"));
  if (top > 0 && !logprobs) bad("top_logprobs", "`top_logprobs` needs `logprobs`: true");
  c.logprobs = logprobs ? top : -1;
  engine::SamplingFields sampling;
  sampling.params.temperature = 1.0f;  // the OpenAI default
  sampling = engine::read_sampling(b, sampling, &tok, m.vocab);
  c.sampling = sampling.params;
  c.stop = sampling.stop;
  c.seeded = sampling.seeded;
  c.include_stop_str = sampling.include_stop_str;
  c.skip_special = sampling.skip_special;
  const char* key = chat_max_tokens_key(b);
  const bool given = b.contains(key) && !b[key].is_null();
  const int64_t asked = read_integer(b, key, 1, std::numeric_limits<int64_t>::max(), 0, "a positive integer");
  if (!m.chat) throw ApiError(400, m.no_chat, "messages");
  const ChatRequest request = engine::read_chat_request(ordered, *m.chat);
  const engine::ChatPrompt prompt = engine::chat_prompt(*m.chat, request, tok, m.vocab, cancelled);
  PromptIn in{prompt.ids, prompt.text, true};
  // add_special_tokens (default false for chat: the template writes them): true puts the
  // tokenizer's BOS first.
  if (read_boolean(b, "add_special_tokens", false) && m.add_bos && tok.bos_id() >= 0) in.ids.insert(in.ids.begin(), tok.bos_id());
  engine::truncate_prompt(b, in.ids, m.max_seq);
  c.prompts.push_back(std::move(in));
  const engine::PoolLimits pool{m.max_seq, m.page_size, m.pages};
  const int64_t len = static_cast<int64_t>(c.prompts[0].ids.size());
  const int64_t max_new = given ? asked : engine::default_max_new(len, m.max_seq, pool);
  if (max_new < 1)
    bad("messages", str("the conversation (", len, " tokens) leaves no room for a reply in MaxSeq = ", m.max_seq,
                        " (raise --max-seq, or shorten the conversation)"));
  if (const std::string why = engine::admission_problem(len, max_new, pool, "the conversation", key); !why.empty())
    bad(given || why.find("pages") != std::string::npos ? key : "messages", why);
  c.max_tokens.push_back(max_new);
  c.sampling.max_new_tokens = max_new;
  engine::check_min_tokens(c.sampling, key);
  c.reasoning_parser = m.reasoning_parser;
  c.thinking = !(request.kwargs.contains("enable_thinking") && request.kwargs["enable_thinking"] == false);
  return c;
} catch (const engine::FieldError& e) {
  throw ApiError(400, e.what(), e.field());
} catch (const jinja::Cancelled& e) {
  throw client_gone(e);
}

CompletionParams parse_request(const std::string& route, const json& body, const ojson& ordered, const Tokenizer& tok,
                               const ServedModel& model, const std::function<bool()>& cancelled) {
  if (route == "/v1/chat/completions") return parse_chat_completion(body, ordered, tok, model, cancelled);
  if (route == "/v1/completions") return parse_completion(body, tok, model);
  throw ApiError(404, str("no route POST ", route, " (/v1/completions or /v1/chat/completions)"), "url");
}

std::vector<ServeJob> jobs_of(const CompletionParams& p, uint64_t seed) {
  std::vector<ServeJob> jobs;
  for (size_t i = 0; i < p.prompts.size(); ++i)
    for (int64_t k = 0; k < p.n; ++k) {
      ServeJob job;
      job.prompt = p.prompts[i].ids;
      job.params = p.sampling;
      job.params.max_new_tokens = p.max_tokens[i];
      job.params.seed = seed + static_cast<uint64_t>(k);  // n samples of one prompt differ
      job.stop = p.stop;
      job.logprobs = p.logprobs;
      job.prompt_logprobs = p.prompt_logprobs;
      job.include_stop_str = p.include_stop_str;
      job.skip_special = p.skip_special;
      job.reasoning_parser = p.reasoning_parser;
      job.thinking = p.thinking;
      jobs.push_back(std::move(job));
    }
  return jobs;
}

bool apply_event(ChoiceResult& r, const JobEvent& e) {
  r.tokens.insert(r.tokens.end(), e.tokens.begin(), e.tokens.end());
  r.text += e.text;
  r.reasoning += e.reasoning;
  if (!e.done) return false;
  r.finish_reason = e.finish_reason;
  r.error = e.error;
  r.token_logprobs = e.token_logprobs;
  r.top = e.top;
  r.ranks = e.ranks;
  r.stop_reason = !e.stop_string.empty() ? json(e.stop_string) : e.stop_token >= 0 ? json(e.stop_token) : json(nullptr);
  r.tool_calls = e.tool_calls;
  if (!r.tool_calls.empty() && r.finish_reason == "stop") r.finish_reason = "tool_calls";  // as vLLM
  return true;
}

std::string response_id(const CompletionParams& p, uint64_t n) {
  return str(p.chat ? "chatcmpl-" : "cmpl-", p.request_id.empty() ? std::to_string(n) : p.request_id);
}

std::string token_text(const Tokenizer& tok, int32_t id) {
  bool at_start = false;
  std::string s;
  tok.decode_token(id, false, at_start, s);
  return s;
}

std::string echo_text(const Tokenizer& tok, const PromptIn& p) {
  return p.is_text ? p.text : tok.decode(std::span<const TokenId>(p.ids.data(), p.ids.size()), true);
}

namespace {
// A token's text in logprobs, or "token_id:<id>" (return_tokens_as_token_ids).
std::string shown(const Tokenizer& tok, int32_t id, bool as_ids) { return as_ids ? str("token_id:", id) : token_text(tok, id); }
// The first n (< 0: all) of a position's likeliest tokens.
std::vector<std::pair<int32_t, float>> first_of(const std::vector<std::pair<int32_t, float>>& top, int64_t n) {
  return n < 0 || static_cast<size_t>(n) >= top.size() ? top : decltype(top){top.begin(), top.begin() + n};
}
}  // namespace

json prompt_logprobs_json(const Tokenizer& tok, const PromptIn& prompt, const ChoiceResult& r, int64_t n, bool as_ids) {
  json out = json::array({nullptr});
  for (size_t p = 1; p < prompt.ids.size(); ++p) {
    json at = json::object();
    if (p - 1 < r.token_logprobs.size()) {
      const int32_t id = prompt.ids[p];
      at[std::to_string(id)] = {{"logprob", r.token_logprobs[p - 1]},
                                {"rank", p - 1 < r.ranks.size() ? json(r.ranks[p - 1]) : json(nullptr)},
                                {"decoded_token", shown(tok, id, as_ids)}};
      const auto top = p - 1 < r.top.size() ? first_of(r.top[p - 1], n) : std::vector<std::pair<int32_t, float>>{};
      for (size_t k = 0; k < top.size(); ++k)
        if (!at.contains(std::to_string(top[k].first)))
          at[std::to_string(top[k].first)] = {{"logprob", top[k].second}, {"rank", k + 1},
                                              {"decoded_token", shown(tok, top[k].first, as_ids)}};
    }
    out.push_back(std::move(at));
  }
  return out;
}

json logprobs_json(const Tokenizer& tok, const PromptIn& prompt, const ChoiceResult& r, bool echo,
                   size_t first_generated, size_t text_offset, bool as_ids, int64_t top_n) {
  std::vector<int32_t> all = prompt.ids;
  all.insert(all.end(), r.tokens.begin(), r.tokens.end());
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  const size_t from = echo ? 0 : prompt.ids.size() + first_generated;
  size_t offset = text_offset;
  for (size_t p = from; p < all.size(); ++p) {
    const std::string t = shown(tok, all[p], as_ids);
    tokens.push_back(t);
    offsets.push_back(offset);
    offset += t.size();
    if (p == 0 || p - 1 >= r.token_logprobs.size()) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    lps.push_back(r.token_logprobs[p - 1]);
    json top = json::object();
    if (p - 1 < r.top.size())
      for (const auto& [id, lp] : first_of(r.top[p - 1], top_n)) {
        const std::string key = shown(tok, id, as_ids);
        if (!top.contains(key)) top[key] = lp;  // two ids with one text: the likelier
      }
    tops.push_back(std::move(top));
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json chat_logprobs_json(const Tokenizer& tok, const PromptIn& prompt, const ChoiceResult& r, bool as_ids, int64_t top_n) {
  auto entry = [&](int32_t id, float lp) {
    const std::string t = shown(tok, id, as_ids);
    json bytes = json::array();
    for (unsigned char ch : t) bytes.push_back(static_cast<int>(ch));
    return json{{"token", t}, {"logprob", lp}, {"bytes", bytes}};
  };
  json content = json::array();
  for (size_t k = 0; k < r.tokens.size(); ++k) {
    const size_t p = prompt.ids.size() + k;  // position in prompt + completion
    if (p == 0 || p - 1 >= r.token_logprobs.size()) break;
    json e = entry(r.tokens[k], r.token_logprobs[p - 1]);
    std::vector<std::pair<int32_t, float>> top = p - 1 < r.top.size() ? first_of(r.top[p - 1], top_n) : decltype(top){};
    std::stable_sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    json alts = json::array();
    for (const auto& [id, lp] : top) alts.push_back(entry(id, lp));
    e["top_logprobs"] = std::move(alts);
    content.push_back(std::move(e));
  }
  return {{"content", content}, {"refusal", nullptr}};
}

json completion_body(const std::string& id, int64_t created, const std::string& model, const CompletionParams& p,
                     const std::vector<ChoiceResult>& results, const Tokenizer& tok) {
  json choices = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (const PromptIn& pr : p.prompts) prompt_tokens += static_cast<int64_t>(pr.ids.size());
  for (size_t i = 0; i < results.size(); ++i) {
    const ChoiceResult& r = results[i];
    const PromptIn& pr = p.prompts[i / static_cast<size_t>(p.n)];
    completion_tokens += static_cast<int64_t>(r.tokens.size());
    if (p.chat) {
      choices.push_back({{"index", i},
                         {"message", chat_message(p, r)},
                         {"logprobs", p.logprobs >= 0 ? chat_logprobs_json(tok, pr, r, p.tokens_as_ids, p.logprobs) : json(nullptr)},
                         {"finish_reason", r.finish_reason},
                         {"stop_reason", r.stop_reason}});
      continue;
    }
    const std::string text = p.echo ? echo_text(tok, pr) + r.text : r.text;
    json choice = {{"index", i},
                   {"text", text},
                   {"logprobs", p.logprobs >= 0 ? logprobs_json(tok, pr, r, p.echo, 0, 0, p.tokens_as_ids, p.logprobs)
                                                : json(nullptr)},
                   {"finish_reason", r.finish_reason},
                   {"stop_reason", r.stop_reason}};
    // vLLM puts a completion's prompt_logprobs in its choice (a chat's beside the choices).
    if (p.prompt_logprobs >= 0) choice["prompt_logprobs"] = prompt_logprobs_json(tok, pr, r, p.prompt_logprobs, p.tokens_as_ids);
    choices.push_back(std::move(choice));
  }
  json body = {{"id", id},
               {"object", p.chat ? "chat.completion" : "text_completion"},
               {"created", created},
               {"model", model},
               {"choices", choices},
               {"usage",
                {{"prompt_tokens", prompt_tokens},
                 {"completion_tokens", completion_tokens},
                 {"total_tokens", prompt_tokens + completion_tokens}}}};
  if (p.chat && p.prompt_logprobs >= 0 && !results.empty())
    body["prompt_logprobs"] = prompt_logprobs_json(tok, p.prompts[0], results[0], p.prompt_logprobs, p.tokens_as_ids);
  return body;
}

json stream_chunk(const std::string& id, int64_t created, const std::string& model, size_t index,
                  const std::string& text, const json& logprobs, const json& finish_reason) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish_reason}}})}};
}

json chat_message(const CompletionParams& p, const ChoiceResult& r) {
  if (p.reasoning_parser.empty()) return {{"role", "assistant"}, {"content", r.text}};
  // As vLLM: what the model did not write is null.
  json message = {{"role", "assistant"},
                  {"content", r.text.empty() ? json(nullptr) : json(r.text)},
                  {"reasoning_content", r.reasoning.empty() ? json(nullptr) : json(r.reasoning)}};
  json calls = json::array();
  for (const auto& [recipient, body] : r.tool_calls) {
    thread_local std::mt19937_64 ids{std::random_device{}()};  // answers are built on many HTTP threads
    calls.push_back({{"id", str("chatcmpl-tool-", std::hex, ids())},
                     {"type", "function"},
                     {"function", {{"name", recipient.substr(recipient.find('.') + 1)}, {"arguments", body}}}});
  }
  message["tool_calls"] = std::move(calls);
  return message;
}

json chat_delta(const std::string& text, const std::string& reasoning) {
  json delta = json::object();
  if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
  if (!text.empty()) delta["content"] = text;
  return delta;
}

json chat_chunk(const std::string& id, int64_t created, const std::string& model, size_t index, const json& delta,
                const json& logprobs, const json& finish_reason) {
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"choices",
           json::array({{{"index", index}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish_reason}}})}};
}

json tokenize_body(const json& b, const ojson& ordered, const Tokenizer& tok, const ServedModel& m,
                   const std::function<bool()>& cancelled) try {
  check_body(b, m);
  const bool chat = b.contains("messages");
  if (chat == b.contains("prompt")) bad("", "give one of `prompt` (a text) and `messages` (a conversation)");
  std::vector<int32_t> ids;
  if (chat) {
    refuse_unsupported_chat(b);
    if (!m.chat) throw ApiError(400, m.no_chat, "messages");
    const ChatRequest request = engine::read_chat_request(ordered, *m.chat);
    ids = engine::chat_prompt(*m.chat, request, tok, m.vocab, cancelled).ids;
    if (read_boolean(b, "add_special_tokens", false) && m.add_bos && tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
  } else {
    if (!b["prompt"].is_string()) bad("prompt", "`prompt` must be a string");
    ids = engine::encode_text(tok, b["prompt"].get<std::string>(), read_boolean(b, "add_special_tokens", true) && m.add_bos,
                              m.vocab, "prompt");
  }
  json out = {{"count", ids.size()}, {"max_model_len", m.max_seq}, {"tokens", ids}, {"token_strs", nullptr}};
  if (read_boolean(b, "return_token_strs", false)) {
    json strs = json::array();
    for (int32_t id : ids) strs.push_back(token_text(tok, id));
    out["token_strs"] = strs;
  }
  return out;
} catch (const engine::FieldError& e) {
  throw ApiError(400, e.what(), e.field());
} catch (const jinja::Cancelled& e) {
  throw client_gone(e);
}

json detokenize_body(const json& b, const Tokenizer& tok, const ServedModel& m) try {
  check_body(b, m);
  if (!b.contains("tokens")) bad("tokens", "`tokens` is required: a list of token ids");
  std::vector<int32_t> ids;
  if (!(b["tokens"].is_array() && b["tokens"].empty())) ids = engine::token_ids(b["tokens"], "tokens", m.vocab);
  return {{"prompt", tok.decode(std::span<const TokenId>(ids.data(), ids.size()), false)}};
} catch (const engine::FieldError& e) {
  throw ApiError(400, e.what(), "tokens");
}

}  // namespace linnet::serve
