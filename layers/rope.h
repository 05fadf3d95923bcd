// RoPE inverse frequencies, with Llama 3 and linear scaling, computed as Hugging Face does
// (f32 powers of rope_theta; rotate_half pairing i ↔ i + D/2 is the backends' rope op).
#pragma once
#include <vector>

#include "layers/model_config.h"

namespace linnet {

std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace linnet
