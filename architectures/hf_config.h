// Hugging Face config.json → the model's configuration, validated (docs/entries.md "Generics",
// "Weights and shards"), through the architecture its model_type names (architectures/registry.cpp).
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "layers/model_config.h"

namespace linnet {

// Parses and validates; `source` (a path) prefixes every error message.
ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& source);
// Why `path` is not a checkpoint directory, for the user ("" when it is one): a file (a
// llama2.c .bin named with the command that imports it), or a folder whose subfolders are.
std::string not_a_checkpoint(const std::string& path);
// A config.json path, or a directory holding one (anything else: not_a_checkpoint's error).
ModelConfig load_hf_config(const std::string& path);
// The config.json that parse_hf_config reads back as `c`.
nlohmann::json to_hf_config(const ModelConfig& c);

}  // namespace linnet
