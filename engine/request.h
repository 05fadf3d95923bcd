// What the engine is asked and what it answers: a generation request (its prompt ids and
// sampling parameters) and its completion. The engine sees token ids only; text is the
// launcher's business (tokenizer, stop strings through a callback).
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace linnet::engine {

struct SamplingParams {
  int64_t max_new_tokens = 256;
  float temperature = 0;   // 0: greedy
  int64_t top_k = 0;       // 0: off
  float top_p = 1;         // 1: off
  float min_p = 0;         // 0: off
  uint64_t seed = 0;       // Philox key [seed, 0] (docs/entries.md "The batch engine")
  bool ignore_eos = false;  // keep going past end-of-sequence ids (benchmarks)
  // The logit processors (layers/logit_processors.h), greedy and sampled alike:
  float repetition_penalty = 1;               // prompt and output tokens (transformers, vLLM)
  float presence_penalty = 0, frequency_penalty = 0;  // output tokens (OpenAI)
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits; ids sorted, distinct
  int64_t min_tokens = 0;                     // EOS and stop_token_ids banned before this many
  std::vector<std::vector<int32_t>> bad_words;  // id sequences: the last id banned after the others
  std::vector<int32_t> stop_token_ids;        // also finish the request (reason "stop")
  int64_t priority = 0;                       // lower runs first (vLLM's priority scheduling)

  bool uses_seen() const { return repetition_penalty != 1; }
  bool uses_counts() const { return presence_penalty != 0 || frequency_penalty != 0; }
};

// The parameters as JSON and back (serve's messages between ranks).
nlohmann::json to_json(const SamplingParams& p);
SamplingParams sampling_from_json(const nlohmann::json& j);

enum class FinishReason { stop, length };
inline const char* finish_reason_name(FinishReason r) { return r == FinishReason::stop ? "stop" : "length"; }

struct Request {
  size_t index = 0;              // the caller's handle (e.g. the input line)
  std::vector<int32_t> prompt;   // at least one token
  SamplingParams params;
};

struct Completion {
  size_t index = 0;
  std::vector<int32_t> tokens;  // generated ids (an end-of-sequence id that stopped it included)
  FinishReason reason = FinishReason::length;
  int64_t prompt_tokens = 0;
  int64_t preemptions = 0;      // times it was recomputed after its pages were taken
  int32_t stop_token = -1;      // the stop_token_ids id that ended it (vLLM's stop_reason), else -1
};

// Called after each generated token with the tokens so far: returns true when a stop string
// has appeared (the launcher decodes and cuts the text).
using StopCheck = std::function<bool(size_t index, const std::vector<int32_t>& tokens)>;

}  // namespace linnet::engine
