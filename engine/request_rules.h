// The rules a generation request is held to, written once for every way in: a JSONL line of
// `linnet generate`, a /v1/completions or /v1/chat/completions body, a run-batch line. The
// sampling fields, the prompt's token ids against the model's Vocab, admission (prompt + new
// tokens within MaxSeq and the pool) and the end-of-sequence ids. A broken rule is a
// FieldError naming the field, in the API's words ("`top_p` = 2 must be in (0, 1]").
#pragma once
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "engine/request.h"
#include "layers/model_config.h"
#include "tokenizer/tokenizer.h"

namespace linnet::engine {

class FieldError : public Error {
 public:
  FieldError(std::string field, const std::string& message) : Error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// A request field read with its rule; absent or null: the fallback.
int64_t read_integer(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi, int64_t fallback,
                     const std::string& rule);
double read_number(const nlohmann::json& j, const char* key, double fallback);
bool read_boolean(const nlohmann::json& j, const char* key, bool fallback);

// The sampling and stopping fields of a request object, over `defaults`, as vLLM names and
// bounds them: temperature (≥ 0), top_p ((0, 1]), top_k (-1 or 0: off), min_p ([0, 1]), seed
// (≥ 0), ignore_eos, stop (a non-empty string or a list of at most 16), stop_token_ids,
// include_stop_str_in_output, repetition_penalty (> 0), presence_penalty and
// frequency_penalty ([-2, 2]), logit_bias ({"id": bias}, bias clamped to [-100, 100]),
// min_tokens (≥ 0), bad_words (strings, tokenized here as vLLM does), skip_special_tokens,
// spaces_between_special_tokens, priority. Token ids must lie in [0, vocab).
struct SamplingFields {
  SamplingParams params;  // max_new_tokens is the caller's
  std::vector<std::string> stop;
  bool seeded = false;    // "seed" was given
  bool include_stop_str = false;  // include_stop_str_in_output
  bool skip_special = true;       // skip_special_tokens
};
SamplingFields read_sampling(const nlohmann::json& j, SamplingFields defaults, const Tokenizer* tok = nullptr,
                             int64_t vocab = std::numeric_limits<int32_t>::max());
// min_tokens against the request's max_new_tokens (a FieldError naming `key` when above it).
void check_min_tokens(const SamplingParams& p, const std::string& key);

// vLLM's truncate_prompt_tokens: k ≥ 1 keeps the prompt's last k tokens, -1 as many as MaxSeq
// holds; absent or null: `ids` as they are.
void truncate_prompt(const nlohmann::json& j, std::vector<int32_t>& ids, int64_t max_seq);

// A prompt's ids: a text through the tokenizer (whose ids must be the model's, [0, Vocab):
// a tokenizer and config that disagree are named), or a list of ids. `where` names it.
std::vector<int32_t> encode_text(const Tokenizer& tok, std::string_view text, bool add_bos, int64_t vocab,
                                 const std::string& where);
std::vector<int32_t> token_ids(const nlohmann::json& list, const std::string& where, int64_t vocab);

// What the KV pool holds.
struct PoolLimits {
  int64_t max_seq = 0, page_size = 1, pages = 0;
};
// Why `prompt_len` tokens + `max_new` new ones can never run ("" when they can): past MaxSeq,
// or more pages than the pool has. which: "prompt", "prompt[1]"…; key: the field of max_new.
std::string admission_problem(int64_t prompt_len, int64_t max_new, const PoolLimits& pool,
                              const std::string& which = "prompt", const std::string& key = "max_new_tokens");
// max_new when the request gives none: `cap`, but at most what fits in MaxSeq after the
// prompt (as vLLM does when max_tokens is left out).
int64_t default_max_new(int64_t prompt_len, int64_t cap, const PoolLimits& pool);

// Every end-of-sequence id the run stops at: config.json's and generation_config.json's
// (ModelConfig::eos_token_ids), else the tokenizer's.
std::vector<int32_t> end_of_sequence_ids(const ModelConfig& config, const Tokenizer& tok);

}  // namespace linnet::engine
