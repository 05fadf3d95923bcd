#include "layers/model_definition.h"

#include "layers/cache_layout.h"
#include "layers/card_blocks.h"
#include "layers/parameter_table.h"

namespace linnet {

std::vector<card::Block> llama_blocks(const ModelConfig& config) { return card::family_blocks(config, {}); }

const ModelDefinition& llama_definition() {
  static const ModelDefinition llama{llama_parameters, llama_blocks};
  return llama;
}

const ModelDefinition& definition_of(const ModelConfig& config) {
  return config.definition ? *config.definition : llama_definition();
}

std::vector<LayerCacheSpec> layer_states(const ModelConfig& config, const Generics& g) {
  const ModelDefinition& def = definition_of(config);
  return def.state ? def.state(config, g) : layer_cache_specs(config, g);
}

}  // namespace linnet
