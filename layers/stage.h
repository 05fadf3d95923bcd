// A pipeline stage's share of the model (docs/parallel.md "Pipeline stages"; the layout in
// parallel/world_config.h): its contiguous layers, the embedding on the first stage, the final
// norm and lm_head on the last. What footprint.h counts and the network builds and runs.
#pragma once
#include <cstdint>
#include <limits>
#include <string>

namespace linnet {

class Communicator;

struct StageShare {
  int64_t begin = 0, end = std::numeric_limits<int64_t>::max();
  bool first = true, last = true;
  bool runs_layer(int64_t i) const { return i >= begin && i < end; }
  // Whether a rank of this stage holds parameter `card_name`: its layer's, the embedding on the
  // first stage, the rest (the final norm, lm_head) on the last. (A tied lm_head is a view of the
  // embedding, which the last stage then loads whole as well, unless it is also the first.)
  bool holds(const std::string& card_name) const;
};

// Where a rank's network sits in its replica's pipeline: its share, and the communicator of its
// shard's stages (rank = stage; null with one stage). The hidden states go stage to stage over
// it (Network::run) and the last stage's results come back over it (Network::logits, Model's
// entries).
struct StagePlace {
  StageShare share;
  Communicator* pipe = nullptr;
  int stage = 0, stages = 1;
};

}  // namespace linnet
