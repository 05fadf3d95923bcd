// Mixtral (MixtralForCausalLM): every layer a mixture of num_local_experts (default 8) SwiGLU
// experts named w1/w3/w2 under block_sparse_moe, two a token, weights always renormalised; a
// window on every layer when one is set.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "architectures/architecture.h"
#include "architectures/experts.h"

namespace linnet {

namespace {
const ExpertKeys kKeys{.local_only = true, .experts = 8, .per_token = 2, .always_normalized = true,
                       .names = ModelConfig::ExpertNames::mixtral};
}  // namespace

extern const Architecture kMixtral{
    .model_type = "mixtral",
    .class_name = "MixtralForCausalLM",
    .rms_norm_eps = 1e-5,
    .rope_theta = 1000000.0,
    .experts = true,
    .bias = Architecture::Bias::none,
    .refuse =
        [](const ConfigReader& r) {
          if (given(r.j, "n_routed_experts"))
            r.fail(str("'n_routed_experts' = ", r.j["n_routed_experts"].dump(), " is not supported (DeepSeek's experts)"));
        },
    .layers = every_layer_slides,
    .moe = [](const ConfigReader& r, ModelConfig& c) { parse_experts(r, c, kKeys); },
    .write = [](nlohmann::json& j, const ModelConfig& c) { write_experts(j, c, kKeys); },
    .definition = {.parameters =
                       [](const ModelConfig& c, const Generics& g) {
                         return decoder_parameters(c, g, [](ParamTable& t, const ModelConfig& c, int64_t i) {
                           pre_norm_layer(t, c, i,
                                          {.block = "block_sparse_moe", .gate = "w1", .up = "w3", .down = "w2"});
                         });
                       },
                   .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "mixtral"}); }},
};

}  // namespace linnet
