// gpt-oss (GptOssForCausalLM): Llama's decoder with q/k/v/o biases (attention_bias, default
// true), head_dim 64, a learned sink logit per head in every softmax (self_attn.sinks), layers
// alternating sliding (window 128) and full attention as layer_types says (default: even
// layers slide), YaRN RoPE on rotary halves; every layer a mixture of num_local_experts experts,
// num_experts_per_tok a token: the router (mlp.router, with a bias) in the model's dtype, the
// top-k of its logits and their softmax; each expert's gate_up (gate and up interleaved) and
// down with biases, the clamped SwiGLU (swiglu_alpha, swiglu_limit) between them.
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "architectures/architecture.h"
#include "architectures/experts.h"

namespace linnet {

namespace {

const ExpertKeys kKeys{.experts = 128, .per_token = 4, .always_normalized = true,
                       .names = ModelConfig::ExpertNames::gpt_oss};

// transformers' GptOssConfig: layer_types, or sliding_attention on even layers, full on odd.
void gpt_oss_layers(const ConfigReader&, ModelConfig& c, LayerParse& l) {
  for (int64_t i = 0; i < c.layers; ++i) {
    const size_t at = static_cast<size_t>(i);
    const bool s = l.types.empty() ? (i + 1) % 2 != 0 : l.types[at] == "sliding_attention";
    l.sliding[at] = s && l.window;
  }
}

}  // namespace

extern const Architecture kGptOss{
    .model_type = "gpt_oss",
    .class_name = "GptOssForCausalLM",
    .head_dim = 64,
    .rms_norm_eps = 1e-5,
    .sliding_window = 128,
    .rope_theta = 150000.0,
    .experts = true,
    .bias = Architecture::Bias::attention_bias,
    .attention_bias_default = true,
    .writes_layer_types = true,
    .attention =
        [](const ConfigReader& r, ModelConfig&) {
          // GptOssConfig's default RoPE (yarn ×32 over 4096, truncate false) is not written out by
          // linnet's reader: the published configs and save_pretrained state it.
          if (!given(r.j, "rope_parameters") && !given(r.j, "rope_scaling"))
            r.fail("gpt_oss needs its RoPE in rope_parameters (or rope_scaling): transformers' default for it is yarn "
                   "(factor 32, original_max_position_embeddings 4096, beta_fast 32, beta_slow 1, truncate false), "
                   "which linnet does not assume");
        },
    .refuse =
        [](const ConfigReader& r) {
          if (given(r.j, "n_routed_experts"))
            r.fail(str("'n_routed_experts' = ", r.j["n_routed_experts"].dump(), " is not supported (DeepSeek's experts)"));
        },
    .layers = gpt_oss_layers,
    .moe =
        [](const ConfigReader& r, ModelConfig& c) {
          parse_experts(r, c, kKeys);
          ClampedSwiglu s;
          s.alpha = static_cast<float>(r.number("swiglu_alpha", 1.702));
          s.limit = static_cast<float>(r.number("swiglu_limit", 7.0));
          if (!std::isfinite(s.alpha)) r.fail(str("'swiglu_alpha' must be finite, got ", s.alpha));
          if (!(s.limit > 0) || !std::isfinite(s.limit)) r.fail(str("'swiglu_limit' must be positive, got ", s.limit));
          c.clamped_swiglu = s;
          c.attention_sinks = true;
        },
    .write =
        [](nlohmann::json& j, const ModelConfig& c) {
          write_experts(j, c, kKeys);
          if (c.clamped_swiglu) {
            j["swiglu_alpha"] = c.clamped_swiglu->alpha;
            j["swiglu_limit"] = c.clamped_swiglu->limit;
          }
        },
    .definition = {.parameters =
                       [](const ModelConfig& c, const Generics& g) {
                         return decoder_parameters(c, g, [](ParamTable& t, const ModelConfig& c, int64_t i) {
                           pre_norm_layer(t, c, i, {.gpt_oss = true});
                         });
                       },
                   .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "gpt_oss"}); }},
};

}  // namespace linnet
