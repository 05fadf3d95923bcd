// OLMoE (OlmoeForCausalLM): every layer a mixture of num_experts (default 64) experts, eight a
// token, with q/k norms over the whole projection; no sliding window.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "architectures/architecture.h"
#include "architectures/experts.h"

namespace linnet {

namespace {
const ExpertKeys kKeys{.experts = 64, .per_token = 8};
}  // namespace

extern const Architecture kOlmoe{
    .model_type = "olmoe",
    .class_name = "OlmoeForCausalLM",
    .rms_norm_eps = 1e-5,
    .experts = true,
    .layers = window_not_applied,
    .moe = [](const ConfigReader& r, ModelConfig& c) { parse_experts(r, c, kKeys); },
    .finish =
        [](const ConfigReader& r, ModelConfig& c) {
          // OLMoE's q_norm / k_norm span the whole projection, sized hidden_size and
          // hidden_size / heads · kv_heads: a head_dim of another size would not fit them.
          c.qk_norm = ModelConfig::QkNorm::whole;
          if (c.head_dim() * c.heads != c.hidden)
            r.fail(str("head_dim ", c.head_dim(), " × num_attention_heads ", c.heads, " ≠ hidden_size ", c.hidden,
                       ": OLMoE's q/k norms are sized by hidden_size"));
        },
    .write = [](nlohmann::json& j, const ModelConfig& c) { write_experts(j, c, kKeys); },
    .definition = {.parameters =
                       [](const ModelConfig& c, const Generics& g) {
                         return decoder_parameters(c, g, [](ParamTable& t, const ModelConfig& c, int64_t i) {
                           pre_norm_layer(t, c, i);
                         });
                       },
                   .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "olmoe"}); }},
};

}  // namespace linnet
