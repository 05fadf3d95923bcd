// What each layer of a Llama-shaped decoder keeps between calls on this shard (layers/kv_cache.h):
// the default of an architecture's state (layers/model_definition.h layer_states).
#pragma once
#include <vector>

#include "layers/generics.h"
#include "layers/kv_cache.h"

namespace linnet {

// Per layer: today every layer keeps keys and values of its KV heads, D wide — KvHeads/Shards
// heads, or one head replicated on Shards/KvHeads shards when Shards > KvHeads; with latent
// attention, the latent [k_pe | c_kv] of each position, whole on every shard; a Gated DeltaNet
// layer, its recurrent state per row (this shard's key heads, their value heads and channels).
std::vector<LayerCacheSpec> layer_cache_specs(const ModelConfig& config, const Generics& g);

}  // namespace linnet
