// OLMo 2 (Olmo2ForCausalLM): no norms before the blocks, norms after them, q/k norms over the
// whole projection; no sliding window.
#include "architectures/architecture.h"

namespace linnet {

// transformers' post_attention_layernorm is OLMo 2's norm after attention.
void olmo2_layer_parameters(ParamTable& t, const ModelConfig&, int64_t) {
  t.norm("post_attention_layernorm", "post_attention_norm");
  t.attention();
  t.norm("post_feedforward_layernorm", "post_mlp_norm");
  t.dense_mlp();
}

extern const Architecture kOlmo2{
    .model_type = "olmo2",
    .class_name = "Olmo2ForCausalLM",
    .rms_norm_eps = 1e-5,
    .layers = window_not_applied,
    .finish =
        [](const ConfigReader&, ModelConfig& c) {
          c.qk_norm = ModelConfig::QkNorm::whole;
          c.pre_norms = false;
          c.post_norms = true;
        },
    .definition = {.parameters =
                       [](const ModelConfig& c, const Generics& g) {
                         return decoder_parameters(c, g, olmo2_layer_parameters);
                       },
                   .blocks =
                       [](const ModelConfig& c) {
                         return card::family_blocks(c, {.ns = "olmo2"});
                       }},
};

}  // namespace linnet
