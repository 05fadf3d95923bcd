// What an architecture (architectures/, above this library) tells the layers of its network:
// its parameter table and its card's blocks. The architecture's config parsing points
// ModelConfig::definition at its own; parameter_specs and card::blocks_for dispatch to it. A
// ModelConfig made without parsing (tests, presets) gets Llama's (llama_definition).
#pragma once
#include <vector>

#include "layers/card.h"
#include "layers/parameters.h"

namespace linnet {

struct ModelDefinition {
  // Every tensor, in the checkpoint's order (layers/parameter_table.h composes it).
  std::vector<ParamSpec> (*parameters)(const ModelConfig&, const Generics&) = nullptr;
  // The card's blocks, alphabetical (layers/card_blocks.h composes them).
  std::vector<card::Block> (*blocks)(const ModelConfig&) = nullptr;
};

// The plain Llama decoder's: the seed's table (llama_parameters, layers/parameter_table.h) and
// card (the seed's blocks, or Llama's with D, a window, ... where the config has them).
std::vector<card::Block> llama_blocks(const ModelConfig& config);
const ModelDefinition& llama_definition();
// config.definition, or Llama's when none is set.
const ModelDefinition& definition_of(const ModelConfig& config);

}  // namespace linnet
