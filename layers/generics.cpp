#include "layers/generics.h"

#include <algorithm>

#include "core/error.h"

namespace linnet {

int64_t Generics::vocab_valid(int64_t s) const {
  return std::clamp<int64_t>(vocab - vocab_begin(s), 0, vocab_per_shard());
}

int64_t default_page_size(int64_t max_seq) {
  return max_seq > 0 && max_seq < kDefaultPageSize ? max_seq : kDefaultPageSize;
}

const char* moe_sharding_name(MoeSharding s) { return s == MoeSharding::expert ? "expert" : "tensor"; }

Generics bind_generics(const ModelConfig& c, const RunOptions& o) {
  Generics g;
  g.vocab = c.vocab;
  g.hidden = c.hidden;
  g.heads = c.heads;
  g.kv_heads = c.kv_heads;
  g.inner = c.inner;
  g.layers = c.layers;
  g.d = c.head_dim();
  g.experts = c.experts;
  g.top_k = c.experts_per_token;
  g.expert_inner = c.expert_inner;
  g.shared_inner = c.shared_expert_inner;
  g.moe_sharding = o.moe_sharding;
  g.batch = o.batch;
  g.max_seq = o.max_seq > 0 ? o.max_seq : c.max_position;
  g.shards = o.shards == 0 ? 1 : o.shards;  // unresolved (no shard group): one
  g.page_size = o.page_size == 0 ? default_page_size(g.max_seq) : o.page_size;
  g.t = o.dtype.value_or(c.dtype);
  g.kv_dtype = o.kv_cache_dtype;
  if (o.state_snapshots && *o.state_snapshots < 0)
    throw Error(str("--state-snapshots must be 0 or more, got ", *o.state_snapshots));
  if (o.state_snapshots && *o.state_snapshots > 0 && !c.any_linear())
    throw Error(str("--state-snapshots ", *o.state_snapshots, ": ", c.model_type,
                    " keeps no recurrent state (only models with Gated DeltaNet layers do)"));
  g.state_snapshots = c.any_linear() ? o.state_snapshots.value_or(o.batch) : 0;
  if (!is_float(g.t)) throw Error(str("T must be a float dtype, got ", dtype_name(g.t)));
  if (g.batch <= 0) throw Error(str("Batch must be positive, got ", g.batch));
  if (o.max_seq < 0) throw Error(str("MaxSeq must be positive, got ", o.max_seq));
  if (g.shards <= 0) throw Error(str("Shards must be positive, got ", g.shards));
  if (g.page_size <= 0) throw Error(str("PageSize must be positive, got ", g.page_size));
  if (g.max_seq % g.page_size != 0)
    throw Error(str("MaxSeq=", g.max_seq, " does not divide by PageSize=", g.page_size));
  // Cache slots (row·MaxSeq + position) are i32 on every backend.
  constexpr int64_t kSlots = (int64_t{1} << 31) - 1;
  int64_t slots = 0;
  if (__builtin_mul_overflow(g.batch, g.max_seq, &slots) || slots > kSlots)
    throw Error(str("Batch=", g.batch, " × MaxSeq=", g.max_seq, " cache slots exceed the i32 slot range (",
                    kSlots, "); lower --batch or --max-seq"));
  if (c.unapplied_window && *c.unapplied_window < g.max_seq)
    throw Error(str("sliding_window=", *c.unapplied_window, " is smaller than MaxSeq=", g.max_seq, ": transformers' ",
                    c.model_type, " code applies no sliding window, so the config says one thing and the model "
                    "another (at MaxSeq ≤ the window the two are the same: pass --max-seq ",
                    *c.unapplied_window / g.page_size * g.page_size, " or less)"));
  if (g.heads % g.shards != 0) throw Error(str("Heads=", g.heads, " does not divide by Shards=", g.shards));
  if (g.kv_heads % g.shards != 0 && g.shards % g.kv_heads != 0)
    throw Error(str("KvHeads=", g.kv_heads, " does not divide by Shards=", g.shards, ", nor Shards by KvHeads (the KV "
                    "heads are split across the shards, or each replicated on Shards/KvHeads of them)"));
  // Gated DeltaNet layers split by key head (each with its value heads, conv channels and gates).
  if (c.any_linear() && c.linear_attention->key_heads % g.shards != 0)
    throw Error(str("LinearKeyHeads=", c.linear_attention->key_heads, " (linear_num_key_heads) does not divide by Shards=",
                    g.shards, " (a Gated DeltaNet layer is split by key head, each with its value heads)"));
  // Inner splits where a layer has a dense MLP (a Mixtral's layers are all experts).
  if (c.any_dense_mlp() && g.inner % g.shards != 0)
    throw Error(str("Inner=", g.inner, " does not divide by Shards=", g.shards));
  if (c.moe()) {
    if (g.expert_parallel() && g.experts % g.shards != 0)
      throw Error(str("Experts=", g.experts, " does not divide by Shards=", g.shards,
                      " (--moe-sharding expert holds Experts/Shards whole experts per rank; --moe-sharding tensor "
                      "slices every expert instead)"));
    if (g.shared_inner % g.shards != 0)
      throw Error(str("SharedInner=", g.shared_inner, " does not divide by Shards=", g.shards,
                      " (the shared experts are sliced as the MLP is, in either --moe-sharding)"));
    if (!g.expert_parallel() && g.expert_inner % g.shards != 0)
      throw Error(str("ExpertInner=", g.expert_inner, " does not divide by Shards=", g.shards,
                      " (--moe-sharding tensor slices every expert by ExpertInner; --moe-sharding expert holds whole "
                      "experts instead)"));
  }
  return g;
}

}  // namespace linnet
