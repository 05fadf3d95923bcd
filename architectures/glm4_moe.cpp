// GLM-4.5 / GLM-4.6 (Glm4MoeForCausalLM): grouped-query attention with q/k/v biases
// (attention_bias), optional per-head q/k norms (use_qk_norm), half of each head rotated
// (partial_rotary_factor, default 0.5); the first first_k_dense_replace layers a dense MLP,
// the others DeepSeek's experts — the router in f32, sigmoid scores with
// e_score_correction_bias choosing among n_group groups (topk_group kept), the weights
// renormalised (norm_topk_prob) and scaled (routed_scaling_factor) — plus n_shared_experts
// shared experts added to the routed sum. Multi-token-prediction layers in the checkpoint
// (num_nextn_predict_layers: model.layers.<num_hidden_layers>.*) are skipped at load.
#include <nlohmann/json.hpp>

#include "architectures/architecture.h"
#include "architectures/experts.h"

namespace linnet {

extern const Architecture kGlm4Moe{
    .model_type = "glm4_moe",
    .class_name = "Glm4MoeForCausalLM",
    .rms_norm_eps = 1e-5,
    .partial_rotary = true,
    .partial_rotary_default = 0.5,
    .qk_norm_key = true,
    .experts = true,
    .bias = Architecture::Bias::qkv_attention_bias,
    .layers = window_not_applied,
    .moe = [](const ConfigReader& r, ModelConfig& c) { parse_deepseek_experts(r, c, {}); },
    .finish =
        [](const ConfigReader& r, ModelConfig& c) {
          if (r.boolean("use_qk_norm", false)) c.qk_norm = ModelConfig::QkNorm::per_head;
        },
    .write =
        [](nlohmann::json& j, const ModelConfig& c) {
          j["use_qk_norm"] = c.qk_norm == ModelConfig::QkNorm::per_head;
          j["partial_rotary_factor"] = c.partial_rotary_factor;
          write_deepseek_experts(j, c);
        },
    .definition = {.parameters =
                       [](const ModelConfig& c, const Generics& g) {
                         return decoder_parameters(c, g, [](ParamTable& t, const ModelConfig& c, int64_t i) {
                           pre_norm_layer(t, c, i);
                         });
                       },
                   .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "glm4_moe"}); }},
};

}  // namespace linnet
