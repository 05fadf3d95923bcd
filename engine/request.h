// What the engine is asked and what it answers: a generation request (its prompt ids and
// sampling parameters) and its completion. The engine sees token ids only; text is the
// launcher's business (tokenizer, stop strings through a callback).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace linnet::engine {

struct SamplingParams {
  int64_t max_new_tokens = 256;
  float temperature = 0;   // 0: greedy
  int64_t top_k = 0;       // 0: off
  float top_p = 1;         // 1: off
  uint64_t seed = 0;       // Philox key [seed, 0] (SPEC §8)
  bool ignore_eos = false;  // keep going past end-of-sequence ids (benchmarks)
};

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
};

// Called after each generated token with the tokens so far: returns true when a stop string
// has appeared (the launcher decodes and cuts the text).
using StopCheck = std::function<bool(size_t index, const std::vector<int32_t>& tokens)>;

}  // namespace linnet::engine
