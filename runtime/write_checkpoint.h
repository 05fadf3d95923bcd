// Writing Hugging Face checkpoint directories: config.json (the architecture's writer,
// architectures/hf_config.h) plus the weight files (checkpoint/write_weights.h).
#pragma once
#include <cstdint>
#include <string>

#include "layers/model_config.h"

namespace linnet {

// Random weights (checkpoint/random_weights.h), deterministic from seed, stored in dtype;
// config.json's torch_dtype says dtype.
void write_random_checkpoint(ModelConfig config, const std::string& dir, DType dtype, uint64_t seed);

// A llama2.c "version 0" checkpoint (float32) as a Hugging Face checkpoint: q/k rows permuted
// from Meta's interleaved RoPE pairs to Hugging Face's rotate_half halves. Tokenizer files
// beside the input (tokenizer.model, tokenizer.bin) are copied along. Returns the config.
ModelConfig import_llama2c(const std::string& bin_path, const std::string& dir);

}  // namespace linnet
