// The one sampler: a token chosen per row from this shard's f32 logits, with only small
// things crossing ranks — (value, index) pairs for greedy and Gumbel-max, each shard's best
// candidates for top-k / top-p / min-p and for the top-n a server's logprobs report. It
// knows the vocab's split (docs/entries.md "Weights and shards"), not the model.
// `local` everywhere: this shard's logits [R, Vocab/Shards] f32 on the device, the columns
// past vocab_valid(shard) padding.
#pragma once
#include <cstdint>
#include <vector>

#include "layers/choice.h"
#include "layers/context.h"
#include "layers/generics.h"

namespace linnet {

struct Candidate {
  float logit;
  int32_t index;  // in the whole vocab
};
// Larger logit first; the lower index on ties.
inline bool better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.index < b.index);
}

// Every shard's best n of each row, gathered and merged alike on every rank.
struct Offers {
  std::vector<std::vector<Candidate>> merged;  // per row: all shards' offers, best first
  std::vector<float> last;                     // [rows, Shards]: each shard's n-th offer (−inf: it had fewer)
};

class Sampler {
 public:
  Sampler(Backend& backend, Communicator& comm, const Generics& g) : be_(backend), comm_(comm), g_(g) {}

  // Each row's argmax across shards (lowest index on ties). Collective.
  std::vector<int32_t> argmax(const Tensor& local);
  // Every row at one temperature (0: greedy); Gumbel-max with the Philox counter at the row's
  // index and `step` (the sample / generate entries'). Collective.
  std::vector<int32_t> choose(const Tensor& local, float temperature, uint64_t key0, uint64_t key1, int32_t step);
  // Each row its own choice (the batch engine's): its logit processors first, then greedy,
  // Gumbel-max (Philox counter row 0: a row's token does not depend on its place in the batch)
  // or top-k / top-p / min-p. Collective.
  std::vector<int32_t> choose_rows(const Tensor& local, const std::vector<RowChoice>& choices);
  // Host rows [m, width] of this shard's logits (the first vocab_valid(shard) columns real):
  // each shard offers its best n per row. Collective.
  Offers offers(const float* rows, int64_t m, int64_t width, int64_t n);

 private:
  // A top-k / top-p / min-p row's token from its processed logits on this shard.
  int32_t choose_warped(const RowChoice& c, const std::vector<float>& logits);

  Backend& be_;
  Communicator& comm_;
  Generics g_;
};

}  // namespace linnet
