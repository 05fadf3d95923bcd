// Qwen2 (Qwen2ForCausalLM: q/k/v biases always) and Qwen3 (Qwen3ForCausalLM: per-head q/k
// norms, head_dim 128 by default); both slide from layer max_window_layers on when
// use_sliding_window, or as layer_types says.
#include "core/error.h"
#include "architectures/architecture.h"

namespace linnet {

namespace {

void qwen_layers(const ConfigReader& r, ModelConfig& c, LayerParse& l) {
  if (!r.boolean("use_sliding_window", false)) l.window.reset();
  if (!l.types.empty()) {
    for (size_t i = 0; i < l.sliding.size(); ++i) l.sliding[i] = l.types[i] == "sliding_attention" && l.window;
    return;
  }
  int64_t full_layers = 28;  // transformers' Qwen2Config / Qwen3Config default
  if (given(r.j, "max_window_layers")) {
    const nlohmann::json& m = r.j["max_window_layers"];
    if (!m.is_number_integer() || m.get<int64_t>() < 0)
      r.fail(str("'max_window_layers' must be a non-negative integer, got ", m.dump()));
    full_layers = m.get<int64_t>();
  }
  for (int64_t i = 0; i < c.layers; ++i) l.sliding[static_cast<size_t>(i)] = l.window && i >= full_layers;
}

}  // namespace

extern const Architecture kQwen2{
    .model_type = "qwen2",
    .class_name = "Qwen2ForCausalLM",
    .sliding_window = 4096,
    .bias = Architecture::Bias::qkv_always,
    .writes_layer_types = true,
    .writes_use_sliding_window = true,
    .layers = qwen_layers,
    .definition = {.parameters = llama_parameters,
                   .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "qwen2"}); }},
};

extern const Architecture kQwen3{
    .model_type = "qwen3",
    .class_name = "Qwen3ForCausalLM",
    .head_dim = 128,
    .sliding_window = 4096,
    .writes_layer_types = true,
    .writes_use_sliding_window = true,
    .layers = qwen_layers,
    .finish = [](const ConfigReader&, ModelConfig& c) { c.qk_norm = ModelConfig::QkNorm::per_head; },
    .definition = {.parameters =
                       [](const ModelConfig& c, const Generics& g) {
                         return decoder_parameters(c, g, [](ParamTable& t, const ModelConfig& c, int64_t i) {
                           pre_norm_layer(t, c, i);
                         });
                       },
                   .blocks =
                       [](const ModelConfig& c) {
                         return card::family_blocks(c, {.ns = "qwen3"});
                       }},
};

}  // namespace linnet
