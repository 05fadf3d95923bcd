#include "layers/model_definition.h"

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

}  // namespace linnet
