// Gemma 2 (Gemma2ForCausalLM) and Gemma 3's text model (Gemma3ForCausalLM): RMSNorm scaling by
// (1 + w), norms after the blocks, GeGLU with the tanh GELU, embeddings scaled by √hidden,
// attention scaled by query_pre_attn_scalar, soft-capped logits; every other layer slides
// (Gemma 3: five of six, with a RoPE of their own, and per-head q/k norms).
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "architectures/architecture.h"

namespace linnet {

namespace {

void gemma_layers(const ConfigReader& r, ModelConfig& c, LayerParse& l) {
  const bool gemma3 = c.model_type == "gemma3_text";
  if (r.boolean("use_bidirectional_attention", false))
    r.fail("'use_bidirectional_attention' = true is not supported (linnet's attention is causal)");
  int64_t pattern = gemma3 ? 6 : 2;  // Gemma 3: sliding_window_pattern, default 6
  if (gemma3 && given(r.j, "sliding_window_pattern")) pattern = r.positive("sliding_window_pattern");
  for (int64_t i = 0; i < c.layers; ++i) {
    const bool s = l.types.empty() ? (i + 1) % pattern != 0 : l.types[static_cast<size_t>(i)] == "sliding_attention";
    l.sliding[static_cast<size_t>(i)] = s && l.window;
    if (gemma3 && s) c.layer_kinds[static_cast<size_t>(i)].rope = 1;  // the local RoPE
  }
}

void gemma_finish(const ConfigReader& r, ModelConfig& c) {
  const bool gemma2 = c.model_type == "gemma2";
  c.norm_plus_one = true;
  c.post_norms = true;
  if (!gemma2) c.qk_norm = ModelConfig::QkNorm::per_head;
  // transformers: torch.tensor(hidden_size ** 0.5), a float32 scalar.
  c.embedding_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden)));
  const double qpas = r.number("query_pre_attn_scalar", 256);
  if (!(qpas > 0)) r.fail("'query_pre_attn_scalar' must be positive");
  c.attention_scale = 1.0 / std::sqrt(qpas);
  auto cap = [&](const char* key, double fallback) {
    if (r.j.contains(key) && r.j[key].is_null()) return 0.0;
    if (!given(r.j, key)) return fallback;
    const double v = r.number(key, fallback);
    // 0 is not "off": transformers divides by the cap (all-zero logits, uniform attention).
    if (!(v > 0))
      r.fail(str("'", key, "' must be positive or null (null turns soft-capping off; transformers divides by it), got ",
                 r.j[key].dump()));
    return v;
  };
  // Gemma 2 defaults to 50 / 30; transformers' Gemma 3 applies only the final cap.
  if (gemma2) c.attn_softcap = cap("attn_logit_softcapping", 50.0);
  c.final_softcap = cap("final_logit_softcapping", gemma2 ? 30.0 : 0.0);
}

void gemma_write(nlohmann::json& j, const ModelConfig& c) {
  const double s = c.attention_scale.value_or(1.0 / std::sqrt(256.0));
  j["query_pre_attn_scalar"] = std::round(1.0 / (s * s));
  j["final_logit_softcapping"] = c.final_softcap > 0 ? nlohmann::json(c.final_softcap) : nlohmann::json(nullptr);
  j["attn_logit_softcapping"] = c.attn_softcap > 0 ? nlohmann::json(c.attn_softcap) : nlohmann::json(nullptr);
  if (c.model_type == "gemma3_text") j.erase("attn_logit_softcapping");
}

// Norms around both blocks: transformers' post_attention_layernorm is the norm after attention.
void gemma_layer_parameters(ParamTable& t, const ModelConfig&, int64_t) {
  t.norm("input_layernorm", "attention_norm");
  t.norm("post_attention_layernorm", "post_attention_norm");
  t.attention();
  t.norm("pre_feedforward_layernorm", "mlp_norm");
  t.norm("post_feedforward_layernorm", "post_mlp_norm");
  t.dense_mlp();
}


}  // namespace

extern const Architecture kGemma2{
    .model_type = "gemma2",
    .class_name = "Gemma2ForCausalLM",
    .head_dim = 256,
    .tie_word_embeddings = true,
    .sliding_window = 4096,
    .gelu_tanh = true,
    .soft_caps = true,
    .writes_layer_types = true,
    .layers = gemma_layers,
    .finish = gemma_finish,
    .write = gemma_write,
    .definition = {.parameters =
                       [](const ModelConfig& c, const Generics& g) {
                         return decoder_parameters(c, g, gemma_layer_parameters);
                       },
                   .blocks =
                       [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "gemma2"}); }},
};

extern const Architecture kGemma3Text{
    .model_type = "gemma3_text",
    .class_name = "Gemma3ForCausalLM",
    .head_dim = 256,
    .tie_word_embeddings = true,
    .sliding_window = 4096,
    .rope_theta = 1000000.0,
    .gelu_tanh = true,
    .local_rope = true,
    .local_base_freq_key = true,
    .soft_caps = true,
    .writes_layer_types = true,
    .layers = gemma_layers,
    .finish = gemma_finish,
    .write = gemma_write,
    .definition = {.parameters =
                       [](const ModelConfig& c, const Generics& g) {
                         return decoder_parameters(c, g, gemma_layer_parameters);
                       },
                   .blocks =
                       [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "gemma3"}); }},
};

}  // namespace linnet
