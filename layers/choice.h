// How the batch engine has a row's next token chosen (SPEC §8). Not an entry: the model's
// own choice, next to the logits, with a key and a step per row.
#pragma once
#include <cstdint>

namespace linnet {

struct RowChoice {
  float temperature = 0;        // 0: greedy (argmax, lowest index on ties)
  int64_t top_k = 0;            // keep the k largest logits (0: all)
  float top_p = 1;              // then the smallest prefix whose probability reaches p (1: all)
  uint64_t key0 = 0, key1 = 0;  // Philox key: the request's [seed, 0]
  int32_t step = 0;             // tokens the request has generated so far (Philox's step)
};

}  // namespace linnet
