// Llama (LlamaForCausalLM), the plain decoder every other architecture varies, and Mistral
// (MistralForCausalLM): Llama with a window on every layer and no biases.
#include "architectures/architecture.h"

namespace linnet {

extern const Architecture kLlama{
    .model_type = "llama",
    .class_name = "LlamaForCausalLM",
    .mlp_bias = true,
    .layers = window_not_applied,
    .definition = {.parameters = llama_parameters, .blocks = llama_blocks},
};

extern const Architecture kMistral{
    .model_type = "mistral",
    .class_name = "MistralForCausalLM",
    .sliding_window = 4096,
    .bias = Architecture::Bias::none,
    .layers = every_layer_slides,
    .definition = {.parameters = llama_parameters,
                   .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "mistral"}); }},
};

}  // namespace linnet
