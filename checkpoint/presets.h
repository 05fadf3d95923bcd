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

}  // namespace linnet
