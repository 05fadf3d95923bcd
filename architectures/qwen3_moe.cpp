// Qwen3-MoE (Qwen3MoeForCausalLM): Qwen 3 whose layers are mixtures of num_experts (default
// 128) experts of moe_intermediate_size, eight a token, except mlp_only_layers and those
// decoder_sparse_step skips; every layer slides when use_sliding_window.
#include <nlohmann/json.hpp>

#include "architectures/architecture.h"
#include "architectures/experts.h"

namespace linnet {

namespace {

const ExpertKeys kKeys{.experts = 128, .per_token = 8, .inner_key = true, .sparse_layer_keys = true};

// Its config class has no layer_types nor max_window_layers; the model masks all layers alike.
void qwen3_moe_layers(const ConfigReader& r, ModelConfig&, LayerParse& l) {
  if (!r.boolean("use_sliding_window", false)) l.window.reset();
  for (size_t i = 0; i < l.sliding.size(); ++i) l.sliding[i] = l.window.has_value();
}

}  // namespace

extern const Architecture kQwen3Moe{
    .model_type = "qwen3_moe",
    .class_name = "Qwen3MoeForCausalLM",
    .sliding_window = 4096,
    .experts = true,
    .writes_use_sliding_window = true,
    .layers = qwen3_moe_layers,
    .moe = [](const ConfigReader& r, ModelConfig& c) { parse_experts(r, c, kKeys); },
    .finish = [](const ConfigReader&, ModelConfig& c) { c.qk_norm = ModelConfig::QkNorm::per_head; },
    .write =
        [](nlohmann::json& j, const ModelConfig& c) {
          write_experts(j, c, kKeys);
          if (!c.moe()) return;
          j["moe_intermediate_size"] = c.expert_inner;
          write_sparse_layer_keys(j, c);
        },
    .definition = {.parameters =
                       [](const ModelConfig& c, const Generics& g) {
                         return decoder_parameters(c, g, [](ParamTable& t, const ModelConfig& c, int64_t i) {
                           pre_norm_layer(t, c, i);
                         });
                       },
                   .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "qwen3_moe"}); }},
};

}  // namespace linnet
