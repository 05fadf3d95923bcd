// OLMo 3 (Olmo3ForCausalLM): OLMo 2 (norms after the blocks only, q/k norms over the whole
// projection) whose layers slide as layer_types says (default: three sliding, the fourth full)
// within sliding_window (default 4096; null: none slides). Its RoPE is per layer type: the
// classic rope_theta / rope_scaling (or rope_parameters.full_attention) set the full layers';
// the sliding ones rotate with rope_parameters.sliding_attention, default RoPE of base 500000
// unless it names another — transformers' Olmo3Config hands a top-level rope_theta to the
// full layers alone.
#include "architectures/architecture.h"

namespace linnet {

namespace {

void olmo3_layers(const ConfigReader&, ModelConfig& c, LayerParse& l) {
  for (int64_t i = 0; i < c.layers; ++i) {
    const size_t at = static_cast<size_t>(i);
    const bool s = l.types.empty() ? (i + 1) % 4 != 0 : l.types[at] == "sliding_attention";
    l.sliding[at] = s && l.window;
    // A sliding_attention layer takes that type's RoPE even when no window is set.
    if (s) c.layer_kinds[at].rope = 1;
  }
}

}  // namespace

extern const Architecture kOlmo3{
    .model_type = "olmo3",
    .class_name = "Olmo3ForCausalLM",
    .rms_norm_eps = 1e-5,
    .sliding_window = 4096,
    .rope_theta = 500000.0,
    .local_rope = true,
    .local_rope_theta = 500000.0,
    .writes_layer_types = true,
    .layers = olmo3_layers,
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
                         return card::family_blocks(c, {.ns = "olmo3"});
                       }},
};

}  // namespace linnet
