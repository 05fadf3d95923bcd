// What an architecture (architectures/, above this library) tells the layers of its network:
// its parameter table, its card's blocks, how each layer is built from blocks and what each
// layer keeps between calls. The architecture's config parsing points
// ModelConfig::definition at its own; parameter_specs and card::blocks_for dispatch to it. A
// ModelConfig made without parsing (tests, presets) gets Llama's (llama_definition).
#pragma once
#include <vector>

#include "layers/card.h"
#include "layers/decoder_layer.h"
#include "layers/kv_cache.h"
#include "layers/parameters.h"
#include "layers/weight_loader.h"

namespace linnet {

struct ModelDefinition {
  // Every tensor, in the checkpoint's order (layers/parameter_table.h composes it).
  std::vector<ParamSpec> (*parameters)(const ModelConfig&, const Generics&) = nullptr;
  // The card's blocks, alphabetical (layers/card_blocks.h composes them).
  std::vector<card::Block> (*blocks)(const ModelConfig&) = nullptr;
  // Layer `layer` of the network on shard `shard`, its weights read through the loader
  // (null: decoder_layer, layers/decoder_builder.h).
  DecoderLayer (*layer)(WeightLoader&, const ModelConfig&, const Generics&, int64_t layer, int64_t shard) = nullptr;
  // What each layer keeps between calls on this shard (null: layer_cache_specs,
  // layers/cache_layout.h — keys and values of its KV heads).
  std::vector<LayerCacheSpec> (*state)(const ModelConfig&, const Generics&) = nullptr;
};

// The plain Llama decoder's: the seed's table (llama_parameters, layers/parameter_table.h) and
// card (the seed's blocks, or Llama's with D, a window, ... where the config has them).
std::vector<card::Block> llama_blocks(const ModelConfig& config);
const ModelDefinition& llama_definition();
// config.definition, or Llama's when none is set.
const ModelDefinition& definition_of(const ModelConfig& config);
// What each layer keeps on this shard: the definition's state, or layer_cache_specs. The one
// rule the network allocates by and the footprint counts by.
std::vector<LayerCacheSpec> layer_states(const ModelConfig& config, const Generics& g);

}  // namespace linnet
