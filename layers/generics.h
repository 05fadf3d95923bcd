// The card's generics (docs/entries.md "Generics"): what a checkpoint binds plus the run options.
#pragma once
#include <optional>
#include <string>

#include "layers/model_config.h"

namespace linnet {

// How a mixture of experts is split over the Shards of a replica (--moe-sharding).
//   expert: each rank holds Experts/Shards whole experts (reads only their tensors); a token's
//           row goes to the ranks of the experts it chose and its results come back (an
//           all-to-all of rows each way, in SparseMoe::forward).
//   tensor: every expert is sliced as SwiGlu is (gate/up by ExpertInner rows, down by columns,
//           its partial sums all-reduced).
enum class MoeSharding { expert, tensor };
const char* moe_sharding_name(MoeSharding s);

// PageSize when none is given: 64 positions, or MaxSeq itself when MaxSeq is shorter (a
// checkpoint whose max_position_embeddings is 16 runs with pages of 16, one a row).
constexpr int64_t kDefaultPageSize = 64;
int64_t default_page_size(int64_t max_seq);

struct RunOptions {
  int64_t batch = 1;
  int64_t max_seq = 0;  // 0: max_position_embeddings
  int64_t shards = 0;  // 0: the shard group's size (the loader decides); alone, 1
  int64_t page_size = 0;  // 0: default_page_size(MaxSeq)
  std::optional<DType> dtype;  // default: the checkpoint's torch_dtype
  MoeSharding moe_sharding = MoeSharding::expert;
  // The KV cache's dtype (--kv-cache-dtype); default (auto): the backend's compute dtype.
  std::optional<DType> kv_cache_dtype;
  // Recurrent-state snapshots (--state-snapshots); default: Batch where the model keeps such a
  // state (Gated DeltaNet layers), else none.
  std::optional<int64_t> state_snapshots;
};

struct Generics {
  int64_t vocab = 0, hidden = 0, heads = 0, kv_heads = 0, inner = 0, layers = 0;
  int64_t d = 0;  // the head dim: config.json's head_dim, else H / Heads
  // Mixtures of experts (0 without): Experts, TopK, ExpertInner and how they are sharded.
  int64_t experts = 0, top_k = 0, expert_inner = 0;
  int64_t shared_inner = 0;  // SharedInner: the shared experts' SwiGLU (0: none), sliced as the MLP is
  MoeSharding moe_sharding = MoeSharding::expert;
  int64_t batch = 1, max_seq = 0, shards = 1, page_size = 64;
  DType t = DType::bf16;
  // The KV cache's dtype when it is not the backend's compute dtype (--kv-cache-dtype): K and V
  // are rounded to it as they are stored and as attention reads them.
  std::optional<DType> kv_dtype;
  // Models with a recurrent state (Gated DeltaNet): snapshots of a row's state the engine keeps
  // at page boundaries for prefix sharing — state rows past Batch (docs/entries.md "Recurrent
  // state"). 0 for every other model.
  int64_t state_snapshots = 0;
  // What the cache holds a value in, beside activations in `compute`.
  DType cache_dtype(DType compute) const { return kv_dtype.value_or(compute); }

  int64_t head_dim() const { return d; }
  int64_t pages_per_row() const { return max_seq / page_size; }
  int64_t num_pages() const { return batch * pages_per_row(); }
  // Rows of each recurrent state tensor: Batch running sequences, then the snapshots.
  int64_t state_rows() const { return batch + state_snapshots; }
  // Per shard (rank s of shards): heads, kv heads, inner rows, and lm_head rows. A vocab
  // that does not divide is padded: each shard holds ⌈Vocab/Shards⌉ rows.
  int64_t heads_per_shard() const { return heads / shards; }
  // KV heads are split when KvHeads divides by Shards; when Shards is a multiple of KvHeads
  // each shard keeps the one KV head its q heads use, replicated on Shards/KvHeads shards
  // (vLLM's replication when tp > num_kv_heads).
  int64_t kv_replicas() const { return shards > kv_heads ? shards / kv_heads : 1; }
  int64_t kv_heads_per_shard() const { return shards > kv_heads ? 1 : kv_heads / shards; }
  int64_t kv_head_begin(int64_t s) const { return s / kv_replicas() * kv_heads_per_shard(); }
  int64_t inner_per_shard() const { return inner / shards; }
  int64_t shared_inner_per_shard() const { return shared_inner / shards; }
  int64_t vocab_per_shard() const { return (vocab + shards - 1) / shards; }
  // Experts: whole experts per shard (expert sharding; every expert under tensor sharding), the
  // first of shard s, and each expert's inner rows per shard (sliced under tensor sharding).
  bool expert_parallel() const { return moe_sharding == MoeSharding::expert; }
  int64_t experts_per_shard() const { return expert_parallel() ? experts / shards : experts; }
  int64_t expert_begin(int64_t s) const { return expert_parallel() ? s * experts_per_shard() : 0; }
  int64_t expert_inner_per_shard() const { return expert_parallel() ? expert_inner : expert_inner / shards; }
  // The shard holding expert e under expert sharding.
  int64_t expert_owner(int64_t e) const { return e / experts_per_shard(); }
  // Real (unpadded) vocab rows of shard s, and where they start.
  int64_t vocab_begin(int64_t s) const { return s * vocab_per_shard(); }
  int64_t vocab_valid(int64_t s) const;
};

// Binds and validates; errors name the rule (e.g. "Heads=6 does not divide by Shards=4").
Generics bind_generics(const ModelConfig& config, const RunOptions& options);

}  // namespace linnet
