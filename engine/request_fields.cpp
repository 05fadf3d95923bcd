#include "engine/request_fields.h"

#include <spdlog/spdlog.h>

#include "core/error.h"

#include <algorithm>
#include <mutex>
#include <set>

namespace linnet::engine {

namespace {
constexpr Handling X = Handling::absent, H = Handling::honoured, R = Handling::refused, A = Handling::accepted;
}  // namespace

const std::vector<RequestField>& request_fields() {
  //  name                          generate  completions  chat   probe        neutral / what
  static const std::vector<RequestField> fields = {
      {"id", H, X, X, "\"a\"", "", "the line's id, copied into its result"},
      {"text", H, X, X, "\"Hello\"", "", "the prompt as text"},
      {"tokens", H, X, X, "[1, 2]", "", "the prompt as token ids"},
      {"prompt", X, H, X, "\"Hello\"", "", "a text, token ids, or a list of either"},
      {"messages", H, X, H, "[{\"role\": \"user\", \"content\": \"Hi\"}]", "", "the conversation, rendered by the chat template"},
      {"model", X, H, H, "\"<served name>\"", "", "must name this server's model (404 otherwise)"},
      {"max_new_tokens", H, X, X, "3", "", "tokens to generate at most"},
      {"max_tokens", X, H, H, "3", "", "tokens to generate at most (chat: the older name)"},
      {"max_completion_tokens", X, X, H, "3", "", "tokens to generate at most"},
      {"temperature", H, H, H, "0.5", "", "0 greedy; else sampling at this temperature"},
      {"top_k", H, H, H, "5", "", "keep the k likeliest tokens (-1 or 0: all)"},
      {"top_p", H, H, H, "0.9", "", "then the smallest set reaching probability p"},
      {"min_p", H, H, H, "0.1", "", "then those at least min_p × the likeliest's probability"},
      {"seed", H, H, H, "7", "", "the sampling stream (Philox key [seed, 0])"},
      {"repetition_penalty", H, H, H, "1.3", "", "prompt and output tokens' logits ÷ (or ×, when negative) it"},
      {"presence_penalty", H, H, H, "0.5", "", "output tokens' logits − it"},
      {"frequency_penalty", H, H, H, "0.5", "", "output tokens' logits − it × their count"},
      {"logit_bias", H, H, H, "{\"5\": -100}", "", "added to those tokens' logits (clamped to ±100)"},
      {"min_tokens", H, H, H, "1", "", "no EOS, stop id or stop string before this many tokens"},
      {"bad_words", H, H, H, "[\"xyz\"]", "", "words never generated (their last token banned after the others)"},
      {"stop", H, H, H, "[\"\\n\"]", "", "stop strings (cut from the text)"},
      {"stop_token_ids", H, H, H, "[5]", "", "token ids that finish the answer (finish_reason \"stop\", stop_reason the id)"},
      {"ignore_eos", H, H, H, "true", "", "do not stop at end-of-sequence tokens"},
      {"include_stop_str_in_output", H, H, H, "true", "", "keep the stop string (or stop token's text) that ended it"},
      {"skip_special_tokens", H, H, H, "false", "", "false: special tokens' text is in the answer"},
      {"spaces_between_special_tokens", H, H, H, "false", "",
       "checked, no effect: only a slow tokenizer's decode reads it (vLLM's fast-tokenizer detokenizer does not)"},
      {"add_special_tokens", H, H, H, "false", "", "BOS before a text prompt (completions: the tokenizer's choice; chat: false)"},
      {"truncate_prompt_tokens", H, H, H, "4", "", "keep the prompt's last k tokens (-1: what MaxSeq holds)"},
      {"priority", H, H, H, "1", "", "lower runs first: the waiting line and preemption follow it"},
      {"request_id", X, H, H, "\"abc\"", "", "the response's id: cmpl-<request_id> / chatcmpl-<request_id>"},
      {"n", X, H, H, "2", "", "answers per prompt"},
      {"best_of", X, R, R, "3", "1 or n", "candidates to pick the best from (linnet: only n)"},
      {"use_beam_search", X, R, R, "true", "false", "beam search"},
      {"length_penalty", X, R, R, "0.5", "1", "beam search's length penalty"},
      {"stream", X, H, H, "true", "", "server-sent events"},
      {"stream_options", X, H, H, "{\"include_usage\": true}", "", "include_usage (chat: continuous_usage_stats refused)"},
      {"logprobs", X, H, H, "1", "", "completions: the n likeliest per token; chat: true/false"},
      {"top_logprobs", X, X, H, "2", "", "chat: the n likeliest per token"},
      {"prompt_logprobs", X, H, H, "1", "", "the prompt's tokens' log-probabilities and their n likeliest"},
      {"return_tokens_as_token_ids", X, H, H, "true", "", "logprobs' tokens as \"token_id:<id>\""},
      {"echo", X, H, R, "true", "false", "the prompt before the answer (chat: refused)"},
      {"suffix", X, R, R, "\"x\"", "\"\" or null", "insertion"},
      {"user", X, A, A, "\"u1\"", "", "no effect: an end-user id for the provider's records"},
      {"metadata", X, A, A, "{\"k\": \"v\"}", "", "no effect: stored completions' tags; nothing is stored"},
      {"store", X, A, A, "true", "", "no effect: nothing is stored"},
      {"service_tier", X, A, A, "\"auto\"", "", "no effect: one tier"},
      {"cache_salt", X, A, A, "\"s\"", "", "no effect on the answer: prefix sharing never changes numbers here"},
      {"parallel_tool_calls", X, X, A, "false", "", "no effect without tools"},
      {"response_format", X, R, R, "{\"type\": \"json_object\"}", "{\"type\": \"text\"}", "structured output"},
      {"guided_json", X, R, R, "{}", "null", "structured output"},
      {"guided_regex", X, R, R, "\"a+\"", "null", "structured output"},
      {"guided_choice", X, R, R, "[\"a\"]", "null", "structured output"},
      {"guided_grammar", X, R, R, "\"root ::= \\\"a\\\"\"", "null", "structured output"},
      {"structured_outputs", X, R, R, "{\"regex\": \"a+\"}", "null", "structured output"},
      {"allowed_token_ids", X, R, R, "[1]", "null", "a token whitelist"},
      {"logits_processors", X, R, R, "[\"x\"]", "null", "custom processors"},
      {"return_token_ids", X, R, R, "true", "false or null", "token ids in the response"},
      {"kv_transfer_params", X, R, R, "{}", "null", "disaggregated prefill"},
      {"vllm_xargs", X, R, R, "{\"a\": 1}", "null", "vLLM's extra arguments"},
      {"tools", X, X, R, "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", "null", "tool calls"},
      {"tool_choice", X, X, R, "\"auto\"", "\"none\"", "tool calls"},
      {"functions", X, X, R, "[{\"name\": \"f\"}]", "null", "tool calls"},
      {"function_call", X, X, R, "\"auto\"", "\"none\"", "tool calls"},
      {"reasoning_effort", H, X, H, "\"low\"", "", "the template's reasoning_effort (gpt-oss: low, medium, high)"},
      {"modalities", X, X, R, "[\"audio\"]", "[\"text\"]", "text only"},
      {"audio", X, X, R, "{}", "null", "text only"},
      {"prediction", X, X, R, "{}", "null", "predicted outputs"},
      {"chat_template", X, X, R, "\"{{ 1 }}\"", "null", "a template per request (start the server with --chat-template)"},
      {"chat_template_kwargs", H, X, H, "{\"x\": 1}", "", "variables for the chat template"},
      {"add_generation_prompt", H, X, H, "false", "", "the template's generation prompt"},
      {"continue_final_message", H, X, H, "true", "", "continue the last (assistant) message"},
      {"documents", H, X, H, "[{\"text\": \"d\"}]", "", "documents for the chat template"},
  };
  return fields;
}

const char* route_name(Route r) {
  return r == Route::generate_line ? "a generate line" : r == Route::completions ? "/v1/completions" : "/v1/chat/completions";
}

std::vector<std::string> field_names(Route route) {
  std::vector<std::string> out;
  for (const auto& f : request_fields())
    if (f.on(route) != Handling::absent) out.push_back(f.name);
  return out;
}

std::vector<std::string> warn_unknown_fields(const nlohmann::json& body, Route route) {
  static std::mutex mu;
  static std::set<std::string> warned;
  std::vector<std::string> unknown;
  if (!body.is_object()) return unknown;
  const auto known = field_names(route);
  for (const auto& [key, value] : body.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    unknown.push_back(key);
    std::lock_guard lock(mu);
    if (warned.insert(str(route_name(route), "\n", key)).second)
      spdlog::warn("{}: the field '{}' is not one linnet knows; it is ignored (said once per field)", route_name(route),
                   key);
  }
  return unknown;
}

}  // namespace linnet::engine
