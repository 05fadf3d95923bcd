// The OpenAI API as `linnet serve` and `linnet run-batch` speak it: a completions or chat
// completions body checked and made into prompts and sampling parameters (errors name the field,
// the index and the rule, as docs/entries.md "Bad input" asks), the response bodies (whole, or as
// server-sent-event chunks) built from what the engine reports, and vLLM's /tokenize and
// /detokenize. No HTTP here: tests call these directly.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/request.h"
#include "serve/jobs.h"
#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace linnet::serve {

// An error the client gets as {"error": {"message", "type", "param", "code"}} with `status`.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string type = "")
      : std::runtime_error(message), status_(status), param_(std::move(param)), type_(std::move(type)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  std::string type() const;
  nlohmann::json body() const;

 private:
  int status_;
  std::string param_, type_;
};

// What a request may ask of this server's model.
struct ServedModel {
  std::string name;              // the "model" clients name (and /v1/models lists)
  std::string root;              // where it came from (--checkpoint as given): /v1/models' "root", as vLLM's
  int64_t vocab = 0, max_seq = 0;
  int64_t pages = 0, page_size = 0;  // one replica's KV pool
  bool add_bos = true;           // text prompts start with BOS (the checkpoint's tokenizer_config)
  int64_t max_logprobs = 20, max_n = 16;
  int64_t max_prompts = 1024;    // prompts in one request
  const ChatTemplate* chat = nullptr;  // the chat template, when the checkpoint (or --chat-template) has one
  std::string no_chat;                 // else why chat is refused
  std::string reasoning_parser;        // chat answers split into reasoning and content (engine/reasoning.h); "" none
};

struct PromptIn {
  std::vector<int32_t> ids;
  std::string text;  // as given (for echo); empty for token ids
  bool is_text = false;
};

struct CompletionParams {
  bool chat = false;  // /v1/chat/completions: one prompt, the conversation as the template renders it
  std::vector<PromptIn> prompts;
  engine::SamplingParams sampling;  // max_new_tokens as the request gives it (may be 0)
  std::vector<int64_t> max_tokens;  // per prompt: max_new_tokens, or what fits (unset max_tokens)
  bool seeded = false;
  int64_t n = 1;
  bool stream = false, include_usage = false, echo = false;
  int64_t logprobs = -1;  // -1: none; chat: top_logprobs when "logprobs" is true
  std::vector<std::string> stop;
  int64_t prompt_logprobs = -1;  // -1: none; n: the prompt's tokens' and their n likeliest
  bool tokens_as_ids = false;    // return_tokens_as_token_ids
  bool include_stop_str = false, skip_special = true;
  std::string request_id;        // the client's (the response id follows it); "" none
  std::string reasoning_parser;  // chat: the served model's; "" none
  bool thinking = true;          // chat_template_kwargs.enable_thinking (false turns qwen3's reasoning off)
};

// The 404 for a model this server does not serve.
ApiError model_not_found(const std::string& asked, const ServedModel& m);
// The model's entry in GET /v1/models and GET /v1/models/{id}, with vLLM's fields: `created`
// (Unix seconds), `root`, `parent` (null), `max_model_len` and one `permission` entry.
nlohmann::json model_card(const ServedModel& m, int64_t created, const std::string& permission_id);

// The body of POST /v1/completions, checked (throws ApiError 400 naming what is wrong, 404
// for another model's name).
CompletionParams parse_completion(const nlohmann::json& body, const Tokenizer& tok, const ServedModel& model);
// The body of POST /v1/chat/completions (`ordered`: the same body with its keys in the order
// written, for what the template reads). Fields that would change the output and are not
// implemented (tools, response_format, …) are refused by name; a template's raise_exception
// is a 400 with the template's message.
// `cancelled`, when given, is asked every few thousand steps of the chat template's render
// whether the client is gone: true stops it (ApiError 499, which nobody reads).
CompletionParams parse_chat_completion(const nlohmann::json& body, const nlohmann::ordered_json& ordered,
                                       const Tokenizer& tok, const ServedModel& model,
                                       const std::function<bool()>& cancelled = {});
// Either, by route ("/v1/completions" or "/v1/chat/completions").
CompletionParams parse_request(const std::string& route, const nlohmann::json& body,
                               const nlohmann::ordered_json& ordered, const Tokenizer& tok, const ServedModel& model,
                               const std::function<bool()>& cancelled = {});

// The engine's jobs for a request: prompt i / n, sample i % n, sample k seeded seed + k.
std::vector<ServeJob> jobs_of(const CompletionParams& p, uint64_t seed);

// One choice as the engine finished it.
struct ChoiceResult {
  std::vector<int32_t> tokens;
  std::string text, finish_reason, error;
  std::vector<float> token_logprobs;  // positions 1… of prompt + completion
  std::vector<std::vector<std::pair<int32_t, float>>> top;
  std::vector<int64_t> ranks;         // prompt_logprobs: positions 1… of the prompt + completion
  nlohmann::json stop_reason;         // vLLM's: the stop string or stop id that ended it, else null
  std::string reasoning;              // with a reasoning parser
  std::vector<std::pair<std::string, std::string>> tool_calls;  // (recipient, body), harmony's
};
// A chat choice's message (the reasoning parser's fields when the request has one):
// {"role", "content", "reasoning_content", "tool_calls"}.
nlohmann::json chat_message(const CompletionParams& p, const ChoiceResult& r);
// A stream's delta for new text and reasoning (either may be empty): {} when both are.
nlohmann::json chat_delta(const std::string& text, const std::string& reasoning);
// What a job's event adds to its choice: tokens and text; at the end, why it finished and
// its log-probabilities. Returns true when the event finished it.
bool apply_event(ChoiceResult& r, const JobEvent& e);

// A token's own text (no dropped leading space), for logprobs' "tokens" and top_logprobs' keys.
std::string token_text(const Tokenizer& tok, int32_t id);
// The "logprobs" object of a choice: the prompt's tokens too when echo.
// as_ids: return_tokens_as_token_ids ("token_id:<id>" for each token's text).
nlohmann::json logprobs_json(const Tokenizer& tok, const PromptIn& prompt, const ChoiceResult& r, bool echo,
                             size_t first_generated = 0, size_t text_offset = 0, bool as_ids = false,
                             int64_t top_n = -1);
// vLLM's prompt_logprobs: null for the first token, then per prompt token a map of id → {logprob,
// rank, decoded_token} holding the token and the n likeliest.
nlohmann::json prompt_logprobs_json(const Tokenizer& tok, const PromptIn& prompt, const ChoiceResult& r, int64_t n,
                                    bool as_ids);
// The prompt's text for echo.
std::string echo_text(const Tokenizer& tok, const PromptIn& p);

// The whole response body; choices[i] is prompt i / n, sample i % n. A chat request gets
// chat.completion's shape (message, the chat form of logprobs), the others text_completion's.
nlohmann::json completion_body(const std::string& id, int64_t created, const std::string& model,
                               const CompletionParams& p, const std::vector<ChoiceResult>& results,
                               const Tokenizer& tok);
nlohmann::json stream_chunk(const std::string& id, int64_t created, const std::string& model, size_t index,
                            const std::string& text, const nlohmann::json& logprobs, const nlohmann::json& finish_reason);
// A chat.completion.chunk: `delta` {"role": "assistant", "content": ""} first, then {"content": …}.
nlohmann::json chat_chunk(const std::string& id, int64_t created, const std::string& model, size_t index,
                          const nlohmann::json& delta, const nlohmann::json& logprobs, const nlohmann::json& finish_reason);
// The chat form of logprobs, {"content": [{"token", "logprob", "bytes", "top_logprobs": […]}]},
// for the completion's tokens.
nlohmann::json chat_logprobs_json(const Tokenizer& tok, const PromptIn& prompt, const ChoiceResult& r,
                                  bool as_ids = false, int64_t top_n = -1);
// The id a response carries: "cmpl-N" or "chatcmpl-N".
std::string response_id(const CompletionParams& p, uint64_t n);

// vLLM's POST /tokenize ({"prompt"} or {"messages"}: count, max_model_len, tokens,
// token_strs) and POST /detokenize ({"tokens"}: prompt).
nlohmann::json tokenize_body(const nlohmann::json& body, const nlohmann::ordered_json& ordered, const Tokenizer& tok,
                             const ServedModel& model, const std::function<bool()>& cancelled = {});
nlohmann::json detokenize_body(const nlohmann::json& body, const Tokenizer& tok, const ServedModel& model);

// JSON text that never throws on bytes that are not UTF-8 (they become U+FFFD).
std::string dump(const nlohmann::json& j);

}  // namespace linnet::serve
