// Qwen3.5's text models (Qwen3_5ForCausalLM, model_type qwen3_5_text; Qwen3_5MoeForCausalLM,
// qwen3_5_moe_text, whose every layer's MLP is a mixture of experts with a gated shared
// expert) and their forerunner Qwen3-Next (Qwen3NextForCausalLM, qwen3_next: the same layers,
// its DeltaNet projections grouped per key head, experts in the layers decoder_sparse_step and
// mlp_only_layers pick): a hybrid of Gated DeltaNet
// linear attention (layer_types "linear_attention"; default three layers in four, as
// full_attention_interval 4 says) and gated full attention (q_proj's heads [q | gate], the output
// times sigmoid(gate), per-head q/k norms, partial rotary: 0.25 of head_dim 256 by default), a
// dense SwiGLU MLP, every RMSNorm but the gated one scaling by (1 + w). Text positions rotate
// alike in each of M-RoPE's three sections (mrope_section), so its RoPE is the plain one on the
// rotary dims.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "architectures/architecture.h"
#include "architectures/experts.h"

namespace linnet {

namespace {

// transformers' Qwen3_5TextConfig: layer_types, else linear_attention but every
// full_attention_interval-th layer. No layer slides.
void qwen3_5_layers(const ConfigReader& r, ModelConfig& c, LayerParse& l) {
  const int64_t interval = given(r.j, "full_attention_interval") ? r.positive("full_attention_interval") : 4;
  for (int64_t i = 0; i < c.layers; ++i) {
    const size_t at = static_cast<size_t>(i);
    c.layer_kinds[at].linear = l.types.empty() ? (i + 1) % interval != 0 : l.types[at] == "linear_attention";
    l.sliding[at] = false;
  }
  if (l.window) c.unapplied_window = l.window;  // transformers applies none (refused when it would matter)
  l.window.reset();
}

// The linear layers' shape: linear_num_key_heads × linear_key_head_dim for q and k,
// linear_num_value_heads × linear_value_head_dim for v, linear_conv_kernel_dim taps.
LinearAttentionConfig linear_attention_keys(const ConfigReader& r) {
  LinearAttentionConfig la;
  la.key_heads = r.positive("linear_num_key_heads", 16);
  la.key_dim = r.positive("linear_key_head_dim", 128);
  la.value_heads = r.positive("linear_num_value_heads", 32);
  la.value_dim = r.positive("linear_value_head_dim", 128);
  la.conv_kernel = r.positive("linear_conv_kernel_dim", 4);
  if (la.value_heads % la.key_heads != 0)
    r.fail(str("linear_num_value_heads ", la.value_heads, " is not a multiple of linear_num_key_heads ", la.key_heads,
               " (each key head serves linear_num_value_heads / linear_num_key_heads value heads)"));
  return la;
}

void qwen3_5_finish(const ConfigReader& r, ModelConfig& c) {
  c.qk_norm = ModelConfig::QkNorm::per_head;
  c.norm_plus_one = true;
  c.attention_output_gate = true;
  c.linear_attention = linear_attention_keys(r);
}

void qwen3_5_write(nlohmann::json& j, const ModelConfig& c) {
  const LinearAttentionConfig& la = *c.linear_attention;
  j["linear_num_key_heads"] = la.key_heads;
  j["linear_key_head_dim"] = la.key_dim;
  j["linear_num_value_heads"] = la.value_heads;
  j["linear_value_head_dim"] = la.value_dim;
  j["linear_conv_kernel_dim"] = la.conv_kernel;
  j.erase("sliding_window");
}

// Qwen3_5MoeTextConfig: num_experts (256) of moe_intermediate_size (512), num_experts_per_tok (8),
// the chosen weights always renormalised; a shared expert of shared_expert_intermediate_size
// (512) scaled by sigmoid(shared_expert_gate(x)); no dense layer.
const ExpertKeys kMoeKeys{.experts = 256, .per_token = 8, .inner_key = true, .inner = 512, .always_normalized = true};

// Qwen3NextConfig: num_experts 512 of 512, top 10, norm_topk_prob (default true), the layers
// decoder_sparse_step picks and mlp_only_layers does not (the others an MLP of intermediate_size).
const ExpertKeys kNextKeys{.experts = 512, .per_token = 10, .inner_key = true, .inner = 512,
                           .normalized_default = true, .sparse_layer_keys = true};

// The experts as `keys` reads them, and a shared expert of shared_expert_intermediate_size (512)
// scaled by sigmoid(shared_expert_gate(x)) beside them; the writer's counterpart.
void gated_shared_experts(const ConfigReader& r, ModelConfig& c, const ExpertKeys& keys) {
  parse_experts(r, c, keys);
  if (!c.moe()) return;
  c.shared_expert_inner = r.positive("shared_expert_intermediate_size", 512);
  c.shared_expert_gate = true;
}
void write_gated_shared_experts(nlohmann::json& j, const ModelConfig& c, const ExpertKeys& keys) {
  qwen3_5_write(j, c);
  write_experts(j, c, keys);
  if (!c.moe()) return;
  j["moe_intermediate_size"] = c.expert_inner;
  j["shared_expert_intermediate_size"] = c.shared_expert_inner;
  if (keys.sparse_layer_keys) write_sparse_layer_keys(j, c);
}

void qwen3_5_layer_parameters(ParamTable& t, const ModelConfig& c, int64_t i) {
  pre_norm_layer(t, c, i, {.shared = "shared_expert"});
}

// What the three share: head_dim 256, a quarter of it rotated, attention_bias q/k/v/o,
// layer_types with linear_attention, their parameter table; the card's namespace `ns`.
template <const char* ns>
Architecture qwen3_5_family(const char* model_type, const char* class_name) {
  return Architecture{
      .model_type = model_type,
      .class_name = class_name,
      .head_dim = 256,
      .partial_rotary = true,
      .partial_rotary_default = 0.25,
      .bias = Architecture::Bias::attention_bias,
      .linear_attention = true,
      .writes_layer_types = true,
      .layers = qwen3_5_layers,
      .finish = qwen3_5_finish,
      .write = qwen3_5_write,
      .definition = {.parameters =
                         [](const ModelConfig& c, const Generics& g) {
                           return decoder_parameters(c, g, qwen3_5_layer_parameters);
                         },
                     .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = ns}); }},
  };
}
constexpr char kDense[] = "qwen3_5", kMoe[] = "qwen3_5_moe", kNext[] = "qwen3_next";

}  // namespace

extern const Architecture kQwen3_5Text = qwen3_5_family<kDense>("qwen3_5_text", "Qwen3_5ForCausalLM");

extern const Architecture kQwen3_5MoeText = [] {
  Architecture a = qwen3_5_family<kMoe>("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM");
  a.experts = true;
  a.every_layer_sparse = true;
  a.moe = [](const ConfigReader& r, ModelConfig& c) { gated_shared_experts(r, c, kMoeKeys); };
  a.write = [](nlohmann::json& j, const ModelConfig& c) {
    write_gated_shared_experts(j, c, kMoeKeys);
    j.erase("intermediate_size");
  };
  return a;
}();

extern const Architecture kQwen3Next = [] {
  Architecture a = qwen3_5_family<kNext>("qwen3_next", "Qwen3NextForCausalLM");
  a.experts = true;
  a.moe = [](const ConfigReader& r, ModelConfig& c) { gated_shared_experts(r, c, kNextKeys); };
  a.finish = [](const ConfigReader& r, ModelConfig& c) {
    qwen3_5_finish(r, c);
    c.linear_attention->grouped_projections = true;
  };
  a.write = [](nlohmann::json& j, const ModelConfig& c) { write_gated_shared_experts(j, c, kNextKeys); };
  return a;
}();

}  // namespace linnet
