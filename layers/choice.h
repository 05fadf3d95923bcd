// How the batch engine has a row's next token chosen (docs/entries.md "The batch engine"). Not an
// entry: the model's own choice, next to the logits, with a key and a step per row.
#pragma once
#include <cstdint>
#include <vector>

#include "layers/logit_processors.h"

namespace linnet {

struct RowChoice {
  float temperature = 0;        // 0: greedy (argmax, lowest index on ties)
  int64_t top_k = 0;            // keep the k largest logits (0: all)
  float top_p = 1;              // then the smallest prefix whose probability reaches p (1: all)
  float min_p = 0;              // then those at least min_p × the likeliest's probability (0: all)
  uint64_t key0 = 0, key1 = 0;  // Philox key: the request's [seed, 0]
  int32_t step = 0;             // tokens the request has generated so far (Philox's step)
  // Applied to the f32 logits before any of the above (greedy too); views of the caller's
  // data, valid while the step runs.
  LogitProcessors processors;
};

// The n most likely next tokens at each scored position, as a server's `logprobs: n` reports
// them: ids [tokens, n] (most likely first, lowest index on ties; -1 where not scored) and
// their log-probabilities, computed as the target's are (the top-1 of a greedy target equals
// the target's own value bit for bit).
struct TopTokens {
  int64_t n = 0;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  // With want_ranks: per position, the target's rank in the vocabulary — how many tokens have a
  // logit at least the target's (1: the likeliest; vLLM's prompt_logprobs rank); 0 unscored.
  bool want_ranks = false;
  std::vector<int64_t> ranks;
};

}  // namespace linnet
