// Granite (GraniteForCausalLM): Llama with four scaling multipliers (embedding, residual,
// attention, logits).
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "architectures/architecture.h"

namespace linnet {

extern const Architecture kGranite{
    .model_type = "granite",
    .class_name = "GraniteForCausalLM",
    .multipliers = true,
    .mlp_bias = true,
    .layers = window_not_applied,
    .finish =
        [](const ConfigReader& r, ModelConfig& c) {
          auto positive_number = [&](const char* key) {
            const double v = r.number(key, 1.0);
            if (!(v > 0)) r.fail(str("'", key, "' must be positive"));
            return v;
          };
          // Multiplied into float32 tensors: the f32 value is what counts.
          c.embedding_scale = static_cast<float>(positive_number("embedding_multiplier"));
          c.residual_multiplier = static_cast<float>(positive_number("residual_multiplier"));
          c.attention_scale = static_cast<float>(positive_number("attention_multiplier"));
          c.logits_scaling = static_cast<float>(positive_number("logits_scaling"));
        },
    .write =
        [](nlohmann::json& j, const ModelConfig& c) {
          j["embedding_multiplier"] = c.embedding_scale;
          j["residual_multiplier"] = c.residual_multiplier;
          j["attention_multiplier"] = c.attention_scale.value_or(1.0 / std::sqrt(static_cast<double>(c.head_dim())));
          j["logits_scaling"] = c.logits_scaling;
        },
    .definition = {.parameters = llama_parameters,
                   .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "granite"}); }},
};

}  // namespace linnet
