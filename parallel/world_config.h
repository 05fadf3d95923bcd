// The ranks of a job as replicas × pipeline stages × tensor-parallel shards (TensorRT-LLM's
// WorldConfig: one value, computed once, that every part asks). Ranks are laid out shard
// innermost, then stage, then replica — Megatron's and vLLM's order: world rank r is shard
// r % tp of stage (r / tp) % pp of replica r / (tp · pp), so a stage's shards are neighbours
// (one node's GPUs under mpirun or srun) and a replica's stages follow each other.
// Each stage holds a contiguous range of the model's layers (stage_layers); the embedding lives
// on the first, the final norm, lm_head and the sampler on the last (docs/parallel.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace linnet {

struct WorldConfig {
  int world = 1, tp = 1, pp = 1;

  // The layout of `world` ranks for --tp (0: every rank of a replica's stage, world / pp) and
  // --pp; refused, naming the rule, when tp · pp does not divide the world.
  static WorldConfig make(int world, int tp, int pp);

  int replicas() const { return world / (tp * pp); }
  int ranks_per_replica() const { return tp * pp; }
  int shard_of(int rank) const { return rank % tp; }
  int stage_of(int rank) const { return rank / tp % pp; }
  int replica_of(int rank) const { return rank / (tp * pp); }
  int rank_of(int replica, int stage, int shard) const { return (replica * pp + stage) * tp + shard; }
  // "8 ranks = 2 replicas × 2 stages × 2 shards (rank = (replica · 2 + stage) · 2 + shard)".
  std::string describe() const;
};

// A pipeline stage's layers [begin, end) of the model's.
struct StageLayers {
  int64_t begin = 0, end = 0;
  int64_t count() const { return end - begin; }
};

// The contiguous layer ranges of `pp` stages over `layers` layers: `counts` (--pp-layers) when
// given, else even, the layers left over from layers / pp one each to the stages just before the
// last (the last also runs the final norm, lm_head and the sampler: vLLM's get_pp_indices).
// Refused, naming the rule, when there are more stages than layers, or `counts` has another
// length than pp, a stage of no layers, or another sum than `layers`.
std::vector<StageLayers> stage_layers(int64_t layers, int pp, const std::vector<int64_t>& counts = {});

// --pp-layers "12,11,11": the counts, in stage order; refused, naming the entry, where one is not a
// whole number.
std::vector<int64_t> parse_stage_counts(const std::string& text);

}  // namespace linnet
