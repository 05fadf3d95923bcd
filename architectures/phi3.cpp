// Phi-3 (Phi3ForCausalLM): fused qkv_proj and gate_up_proj tensors, a rotated fraction of each
// head (partial_rotary_factor), LongRoPE under its older names, a window on every layer.
#include "architectures/architecture.h"

namespace linnet {

extern const Architecture kPhi3{
    .model_type = "phi3",
    .class_name = "Phi3ForCausalLM",
    .rms_norm_eps = 1e-5,
    .partial_rotary = true,
    .phi3_rope = true,
    .bias = Architecture::Bias::none,
    .layers = every_layer_slides,
    .finish =
        [](const ConfigReader&, ModelConfig& c) {
          c.fused_qkv = c.fused_gate_up = true;
          // Phi3ForCausalLM.prepare_inputs_for_generation drops the cache when a sequence reaches
          // original_max_position_embeddings + 1 tokens with no more cached: every key is
          // recomputed with the long factors. Only longrope changes the keys by it.
          if (c.rope.type == RopeScaling::Type::longrope) c.recompute_cache_at = c.rope.original_max_position;
        },
    .definition = {.parameters =
                       [](const ModelConfig& c, const Generics& g) {
                         return decoder_parameters(c, g, [](ParamTable& t, const ModelConfig&, int64_t) {
                           t.norm("input_layernorm", "attention_norm");
                           t.attention(/*fused_qkv=*/true);
                           t.norm("post_attention_layernorm", "mlp_norm");
                           t.dense_mlp(/*fused_gate_up=*/true);
                         });
                       },
                   .blocks =
                       [](const ModelConfig& c) {
                         return card::family_blocks(c, {.ns = "phi3", .fused_qkv = true, .fused_gate_up = true});
                       }},
};

}  // namespace linnet
