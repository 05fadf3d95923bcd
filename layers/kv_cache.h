// What the network keeps between calls, described per layer and owned by the network (not by
// the attention block): today every layer holds keys and values of its KV heads; the
// description leaves room for what the next architectures keep instead — a latent vector per
// position (MLA), a recurrent state per sequence (Gated DeltaNet), nothing on a layer another
// pipeline stage runs. The attention block is handed its layer's cache on each forward.
// Card notation (Batch, KvHeads, MaxSeq, D, Shards): the generics table of docs/entries.md.
#pragma once
#include <cstdint>
#include <vector>

#include "core/backend.h"

namespace linnet {

// One layer's state.
struct LayerCacheSpec {
  enum class Kind {
    heads,   // keys and values: [Batch, heads, MaxSeq, dim] each
    latent,  // one vector per position: [Batch, 1, MaxSeq, dim], k and v one tensor (MLA's latent)
    // a fixed-size state per row, whatever its length (Gated DeltaNet): the convolution's last
    // K − 1 inputs [Batch, conv_channels, conv_kept] and the delta rule's [Batch, delta.value_heads,
    // delta.key_dim, delta.value_dim], both f32 whatever the cache dtype
    recurrent,
    none,    // no state (a layer this rank does not run)
  };
  Kind kind = Kind::heads;
  int64_t heads = 0;     // heads: on this shard (KvHeads/Shards, or 1 replicated when Shards > KvHeads)
  int64_t dim = 0;       // heads: D; latent: the latent width
  bool sharded = true;   // split over the shards by head (false: every shard holds it whole)
  int64_t conv_channels = 0, conv_kept = 0;  // recurrent: this shard's channels, K − 1
  DeltaNetDims delta;                        // recurrent: this shard's heads

  // Values this layer keeps per (row, position).
  int64_t values_per_slot() const {
    return kind == Kind::heads ? 2 * heads * dim : kind == Kind::latent ? dim : 0;
  }
  // f32 values this layer keeps per row, whatever its length (recurrent).
  int64_t state_values_per_row() const {
    return kind == Kind::recurrent ? conv_channels * conv_kept + delta.state_values() : 0;
  }
};

// One layer's cache as the backend holds it.
struct LayerCache {
  Tensor k, v;  // heads: [Batch, heads, MaxSeq, dim] each; latent: [Batch, 1, MaxSeq, dim], v the same tensor as k; none: undefined
  Tensor conv, delta;  // recurrent: [rows, channels, K − 1] and [rows, value heads, key dim, value dim] f32
};

class KvCache {
 public:
  KvCache() = default;
  // Zeroed state for each layer as `specs` describe, `batch` rows of `max_seq` positions, in
  // `dtype` (the backend's compute dtype); a recurrent layer's state has `state_rows` rows (Batch
  // and the snapshots: Generics::state_rows()).
  KvCache(Backend& backend, const std::vector<LayerCacheSpec>& specs, int64_t batch, int64_t max_seq, DType dtype,
          int64_t state_rows);

  const LayerCacheSpec& spec(size_t layer) const { return specs_[layer]; }
  LayerCache& layer(size_t i) { return layers_[i]; }
  size_t size() const { return layers_.size(); }
  // Bytes this rank holds (what footprint.h counts).
  int64_t bytes() const;
  // Host copies of every layer's tensors in order (k, then v where held; conv, then delta), for
  // tests of "state unchanged".
  std::vector<Tensor> snapshot(Backend& backend) const;

 private:
  std::vector<LayerCacheSpec> specs_;
  std::vector<LayerCache> layers_;
};

}  // namespace linnet
