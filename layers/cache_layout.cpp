#include "layers/cache_layout.h"

namespace linnet {

std::vector<LayerCacheSpec> layer_cache_specs(const ModelConfig&, const Generics& g) {
  const LayerCacheSpec kv{LayerCacheSpec::Kind::heads, g.kv_heads_per_shard(), g.head_dim(), g.kv_replicas() == 1};
  return std::vector<LayerCacheSpec>(static_cast<size_t>(g.layers), kv);
}

}  // namespace linnet
