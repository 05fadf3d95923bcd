#include "layers/cache_layout.h"

namespace linnet {

std::vector<LayerCacheSpec> layer_cache_specs(const ModelConfig& config, const Generics& g) {
  if (config.mla) {
    // Latent attention: [k_pe | c_kv] once per position, whole on every shard (each computes it).
    const LayerCacheSpec latent{LayerCacheSpec::Kind::latent, 1, config.mla->latent_head(), false};
    return std::vector<LayerCacheSpec>(static_cast<size_t>(g.layers), latent);
  }
  const LayerCacheSpec kv{LayerCacheSpec::Kind::heads, g.kv_heads_per_shard(), g.head_dim(), g.kv_replicas() == 1};
  std::vector<LayerCacheSpec> out(static_cast<size_t>(g.layers), kv);
  for (int64_t i = 0; i < g.layers; ++i) {
    if (!config.linear_layer(i)) continue;
    // Gated DeltaNet: this shard's key heads with their value heads and conv channels.
    const LinearAttentionConfig& la = *config.linear_attention;
    LayerCacheSpec r{LayerCacheSpec::Kind::recurrent};
    r.conv_channels = la.conv_channels() / g.shards;
    r.conv_kept = la.conv_kernel - 1;
    r.delta = DeltaNetDims{la.key_heads / g.shards, la.key_dim, la.value_heads / g.shards, la.value_dim};
    out[static_cast<size_t>(i)] = r;
  }
  return out;
}

}  // namespace linnet
