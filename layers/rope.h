// RoPE frequencies computed as Hugging Face transformers computes them (f32 powers of the
// base; rotate_half pairing i ↔ i + R/2 over the rotary dims R is the backends' rope op):
// default, linear, llama3, dynamic NTK, yarn and longrope, and the attention factor yarn and
// longrope multiply cos and sin by.
#pragma once
#include <cstdint>
#include <vector>

#include "layers/model_config.h"

namespace linnet {

struct RopeFrequencies {
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  float scale = 1.0f;           // cos and sin × scale (yarn, longrope)
};

// The frequencies of `rope` for a sequence whose longest position in the call is seq_len − 1
// (transformers' dynamic_rope_update: only dynamic and longrope depend on it; 0: as at load).
RopeFrequencies rope_frequencies(const ModelConfig& config, const Rope& rope, int64_t seq_len = 0);
// Whether the frequencies depend on seq_len, and from which seq_len on they change.
bool rope_depends_on_length(const RopeScaling& s);
int64_t rope_length_threshold(const ModelConfig& config, const RopeScaling& s);
// The model's RoPE (full-attention layers) as at load.
std::vector<float> rope_inv_freq(const ModelConfig& config);
// The RoPE a layer kind uses (`kind.rope` 0: the model's, 1: local_rope).
Rope layer_rope(const ModelConfig& config, int index);

}  // namespace linnet
