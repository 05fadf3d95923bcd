// Writing a Hugging Face checkpoint's weight files: model.safetensors, streamed tensor by tensor
// (an 8B checkpoint never needs its size in RAM). config.json beside them is the architecture's
// to write (runtime/write_checkpoint.h writes both): checkpoint/ handles files only.
#pragma once
#include <cstdint>
#include <string>

#include "layers/model_config.h"

namespace linnet {

// dir/model.safetensors: random weights (checkpoint/random_weights.h) of config's parameters,
// deterministic from seed, stored in dtype. Creates dir.
void write_random_weights(const ModelConfig& config, const std::string& dir, DType dtype, uint64_t seed);

// A llama2.c "version 0" checkpoint (float32) as a Hugging Face checkpoint: q/k rows permuted
// from Meta's interleaved RoPE pairs to Hugging Face's rotate_half halves. Tokenizer files
// beside the input (tokenizer.model, tokenizer.bin) are copied along. Creates dir; returns the
// config (config.json is not written).
ModelConfig import_llama2c_weights(const std::string& bin_path, const std::string& dir);

}  // namespace linnet
