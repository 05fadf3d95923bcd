// SmolLM3 (SmolLM3ForCausalLM): Llama with NoPE layers (no_rope_layers[i] = 0: layer i applies
// no RoPE; default every 4th), which are the ones that slide when a window is used.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "architectures/architecture.h"

namespace linnet {

namespace {

void smollm3_layers(const ConfigReader& r, ModelConfig& c, LayerParse& l) {
  if (!r.boolean("use_sliding_window", false)) l.window.reset();
  if (!l.types.empty())
    for (size_t i = 0; i < l.sliding.size(); ++i) l.sliding[i] = l.types[i] == "sliding_attention" && l.window;
  std::vector<int64_t> use(static_cast<size_t>(c.layers));
  if (given(r.j, "no_rope_layers")) {
    const nlohmann::json& n = r.j["no_rope_layers"];
    if (!n.is_array() || static_cast<int64_t>(n.size()) != c.layers)
      r.fail(str("'no_rope_layers' must list 1 (RoPE) or 0 (none) per layer (", c.layers, "), got ", n.dump()));
    for (size_t i = 0; i < n.size(); ++i) {
      if (!n[i].is_number_integer() || (n[i].get<int64_t>() != 0 && n[i].get<int64_t>() != 1))
        r.fail(str("no_rope_layers[", i, "] must be 0 or 1, got ", n[i].dump()));
      use[i] = n[i].get<int64_t>();
    }
  } else {
    const int64_t every = given(r.j, "no_rope_layer_interval") ? r.positive("no_rope_layer_interval") : 4;
    for (int64_t i = 0; i < c.layers; ++i) use[static_cast<size_t>(i)] = (i + 1) % every != 0;
  }
  for (int64_t i = 0; i < c.layers; ++i) {
    if (!use[static_cast<size_t>(i)]) c.layer_kinds[static_cast<size_t>(i)].rope = -1;
    if (l.types.empty()) l.sliding[static_cast<size_t>(i)] = l.window && !use[static_cast<size_t>(i)];
  }
}

}  // namespace

extern const Architecture kSmolLm3{
    .model_type = "smollm3",
    .class_name = "SmolLM3ForCausalLM",
    .tie_word_embeddings = true,
    .rope_theta = 2000000.0,
    .no_rope_layers = true,
    .mlp_bias = true,
    .writes_layer_types = true,
    .writes_use_sliding_window = true,
    .layers = smollm3_layers,
    .write =
        [](nlohmann::json& j, const ModelConfig& c) {
          nlohmann::json nope = nlohmann::json::array();
          for (int64_t i = 0; i < c.layers; ++i) nope.push_back(c.layer_kind(i).rope < 0 ? 0 : 1);
          j["no_rope_layers"] = nope;
        },
    .definition = {.parameters = llama_parameters,
                   .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "smollm3"}); }},
};

}  // namespace linnet
