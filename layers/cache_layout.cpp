#include "layers/cache_layout.h"

namespace linnet {

std::vector<LayerCacheSpec> layer_cache_specs(const ModelConfig& config, const Generics& g) {
  if (config.mla) {
    // Latent attention: [k_pe | c_kv] once per position, whole on every shard (each computes it).
    const LayerCacheSpec latent{LayerCacheSpec::Kind::latent, 1, config.mla->latent_head(), false};
    return std::vector<LayerCacheSpec>(static_cast<size_t>(g.layers), latent);
  }
  const LayerCacheSpec kv{LayerCacheSpec::Kind::heads, g.kv_heads_per_shard(), g.head_dim(), g.kv_replicas() == 1};
  return std::vector<LayerCacheSpec>(static_cast<size_t>(g.layers), kv);
}

}  // namespace linnet
