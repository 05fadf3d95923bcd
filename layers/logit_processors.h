// What a row's choice does to its logits before the token is chosen: the logits processors of
// transformers' generate (sequence_bias of one token, repetition_penalty, bad_words_ids,
// min_new_tokens) and OpenAI's presence/frequency penalties, then the warpers (temperature,
// top-k, top-p, min-p) in transformers' order. Plain functions over one vocab shard's f32
// logits on the host: the model applies them on each shard to its own vocab rows.
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace linnet {

struct LogitProcessors {
  std::span<const std::pair<int32_t, float>> bias;  // added first (logit_bias), ids sorted
  float repetition_penalty = 1;    // on `seen`: a logit > 0 divided by it, else multiplied
  std::span<const int32_t> seen;   // distinct ids of the prompt and the output, sorted
  // OpenAI's (and vLLM's): logit −= frequency·count + presence·(count > 0), output ids only.
  float presence_penalty = 0, frequency_penalty = 0;
  std::span<const std::pair<int32_t, int32_t>> counts;  // output ids and their counts, sorted
  std::span<const int32_t> banned;  // −inf (bad words' last tokens; EOS before min_tokens)

  bool any() const {
    return !bias.empty() || (repetition_penalty != 1 && !seen.empty()) ||
           ((presence_penalty != 0 || frequency_penalty != 0) && !counts.empty()) || !banned.empty();
  }
};

// Applies `p` to logits[k], the logit of token offset + k, for k < n (one vocab shard), in
// transformers' order: bias, repetition, presence/frequency, banned.
void apply_logit_processors(const LogitProcessors& p, float* logits, int64_t offset, int64_t n);

// The kept set of a sampled row after the warpers, from candidates sorted by logit (highest
// first, lowest id on ties): top_k (0: off), then top_p (1: off) — the smallest prefix whose
// probabilities at `temperature` reach p, over the distribution top_k left (renormalised), or
// with log_z the softmax's log-normaliser over the whole vocabulary without top_k — then min_p
// (0: off): those whose probability is at least min_p times the first's. Returns how many of
// the first candidates are kept (at least one).
struct Warpers {
  float temperature = 1;
  int64_t top_k = 0;
  float top_p = 1;
  float min_p = 0;
};
size_t kept_candidates(const Warpers& w, std::span<const float> sorted_logits, double log_z);

// The distinct sorted ids of `tokens`, and the sorted (id, count) pairs.
std::vector<int32_t> distinct_ids(std::span<const int32_t> tokens);
std::vector<std::pair<int32_t, int32_t>> id_counts(std::span<const int32_t> tokens);
// Adds `id` to the sorted set / counts in place.
void add_seen(std::vector<int32_t>& seen, int32_t id);
void add_count(std::vector<std::pair<int32_t, int32_t>>& counts, int32_t id);

}  // namespace linnet
