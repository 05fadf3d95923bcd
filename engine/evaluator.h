// The scoring engine for `linnet eval`: windows of tokens (a context, then the tokens to
// score) packed into token budgets and scored through the model's packed log-probs — never
// padded, never a [tokens, Vocab] block of logits. The rules for making windows follow
// lm-evaluation-harness (loglikelihood, loglikelihood_rolling).
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace linnet {
class Model;
}

namespace linnet::engine {

// Score `scored` after `context` (context non-empty: its last token predicts scored[0]).
struct Window {
  size_t request = 0;  // the caller's handle
  std::vector<int32_t> context, scored;
  bool greedy = false;     // whether is_greedy is wanted (an argmax per scored token)
  bool per_token = false;  // whether each scored token's ln p is wanted (a server's logprobs)
  int64_t top = 0;         // the n likeliest tokens at each scored position (0: none)
  bool ranks = false;      // each scored token's rank in the vocabulary (1: the likeliest)
};

struct WindowScore {
  double loglikelihood = 0;  // Σ ln p over the scored tokens
  bool greedy = true;        // every scored token was the argmax (when the window asked)
  int64_t tokens = 0;        // scored tokens
  std::vector<float> token_logprobs;                          // per_token: ln p of each scored token
  std::vector<std::vector<std::pair<int32_t, float>>> top;    // top > 0: (id, ln p), likeliest first
  std::vector<int64_t> ranks;                                 // ranks: each scored token's
};

// lm-eval's rolling windows over `tokens` (utils.get_rolling_token_windows with
// context_len 1, then make_disjoint_window): the first window scores the first max_len
// tokens after `prefix`; each later one scores the next max_len with as much of the text
// before them as context as fits in max_len + 1 positions.
std::vector<Window> rolling_windows(size_t request, const std::vector<int32_t>& tokens, int32_t prefix, int64_t max_len);

// lm-eval's loglikelihood request: the last max_len + 1 tokens of context + continuation,
// the continuation scored (an empty context is `prefix`).
Window continuation_window(size_t request, std::vector<int32_t> context, const std::vector<int32_t>& continuation,
                           int32_t prefix, int64_t max_len);

class Evaluator {
 public:
  // token_budget: tokens per packed call (at least the longest window).
  Evaluator(Model& model, int64_t token_budget);
  // Scores the windows into `out` (one per window), in calls of up to token_budget tokens;
  // after each call, `progress(done)`: windows [0, done) are scored.
  void score(const std::vector<Window>& windows, std::vector<WindowScore>& out,
             const std::function<void(size_t done)>& progress = {});
  int64_t calls() const { return calls_; }

 private:
  Model& model_;
  int64_t budget_;
  int64_t calls_ = 0;
};

}  // namespace linnet::engine
