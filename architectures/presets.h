// Named model configurations for `linnet init` and benchmarks: a tiny GQA default and the
// published shapes of well-known checkpoints (the configs in tests/fixtures/configs).
#pragma once
#include <string>
#include <vector>

#include "layers/model_config.h"

namespace linnet {

std::vector<std::string> preset_names();
// Throws linnet::Error listing the presets for an unknown name.
ModelConfig preset_config(const std::string& name);
// A preset's name, else the path of a config.json (or its directory).
ModelConfig preset_or_config(const std::string& name_or_path);

}  // namespace linnet
