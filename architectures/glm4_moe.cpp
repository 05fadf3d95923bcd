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

namespace linnet {

namespace {

using nlohmann::json;

// An integer ≥ 0 (absent: fallback).
int64_t count(const ConfigReader& r, const char* key, int64_t fallback) {
  if (!given(r.j, key)) return fallback;
  const json& v = r.j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= (int64_t{1} << 31))
    r.fail(str("'", key, "' must be a non-negative integer, got ", v.dump()));
  return v.get<int64_t>();
}

void glm4_moe_experts(const ConfigReader& r, ModelConfig& c) {
  const json& j = r.j;
  // Glm4MoeConfig maps num_local_experts onto n_routed_experts; num_experts it does not read.
  if (given(j, "num_experts"))
    r.fail(str("'num_experts' = ", j["num_experts"].dump(),
               " is not read by transformers' Glm4Moe (it reads n_routed_experts, or num_local_experts)"));
  std::optional<int64_t> routed, local;
  if (given(j, "n_routed_experts")) routed = r.positive("n_routed_experts");
  if (given(j, "num_local_experts")) local = r.positive("num_local_experts");
  if (routed && local && *routed != *local)
    r.fail(str("n_routed_experts ", *routed, " and num_local_experts ", *local, " disagree"));
  c.experts = routed ? *routed : local.value_or(128);
  if (c.experts > 1024) r.fail(str(c.experts, " experts per layer are more than linnet's router takes (1024)"));
  c.experts_per_token = r.positive("num_experts_per_tok", 8);
  if (c.experts_per_token > c.experts)
    r.fail(str("num_experts_per_tok ", c.experts_per_token, " is more than the ", c.experts, " experts"));
  if (c.experts_per_token > 64)
    r.fail(str("num_experts_per_tok ", c.experts_per_token, " is more than linnet's router takes (64)"));
  c.expert_inner = r.positive("moe_intermediate_size", 1408);
  c.norm_topk_prob = r.boolean("norm_topk_prob", true);
  c.expert_names = ModelConfig::ExpertNames::qwen;
  c.shared_expert_inner = count(r, "n_shared_experts", 1) * c.expert_inner;

  ExpertChoice ch;
  ch.sigmoid = true;
  ch.groups = r.positive("n_group", 1);
  ch.keep_groups = r.positive("topk_group", 1);
  ch.group_top2 = true;
  ch.normalize = c.norm_topk_prob;
  ch.scale = static_cast<float>(r.number("routed_scaling_factor", 1.0));
  if (!(ch.scale > 0)) r.fail("'routed_scaling_factor' must be positive");
  if (c.experts % ch.groups != 0) r.fail(str("n_group ", ch.groups, " does not divide n_routed_experts ", c.experts));
  if (ch.keep_groups > ch.groups) r.fail(str("topk_group ", ch.keep_groups, " is more than n_group ", ch.groups));
  if (ch.groups > 1 && c.experts / ch.groups < 2)
    r.fail(str("n_group ", ch.groups, " leaves groups of ", c.experts / ch.groups,
               " expert(s); a group's score sums its two best (torch.topk(2))"));
  if (c.experts_per_token > ch.keep_groups * (c.experts / ch.groups))
    r.fail(str("num_experts_per_tok ", c.experts_per_token, " is more than the ", ch.keep_groups * (c.experts / ch.groups),
               " experts of topk_group ", ch.keep_groups, " groups"));
  c.expert_choice = ch;
  c.router_bias = true;  // its router always has e_score_correction_bias

  // transformers: layer i has experts when i ≥ first_k_dense_replace, else an MLP of intermediate_size.
  const int64_t dense = count(r, "first_k_dense_replace", 1);
  for (int64_t i = 0; i < c.layers; ++i) c.layer_kinds[static_cast<size_t>(i)].sparse = i >= dense;
  if (dense >= c.layers) {  // every layer dense: no experts at all
    c.experts = c.experts_per_token = c.expert_inner = c.shared_expert_inner = 0;
    c.expert_choice.reset();
    c.router_bias = false;
  }
  c.mtp_layers = count(r, given(j, "num_nextn_predict_layers") ? "num_nextn_predict_layers" : "num_mtp_layers", 1);
}

}  // namespace

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
    .moe = glm4_moe_experts,
    .finish =
        [](const ConfigReader& r, ModelConfig& c) {
          if (r.boolean("use_qk_norm", false)) c.qk_norm = ModelConfig::QkNorm::per_head;
        },
    .write =
        [](nlohmann::json& j, const ModelConfig& c) {
          j["use_qk_norm"] = c.qk_norm == ModelConfig::QkNorm::per_head;
          j["partial_rotary_factor"] = c.partial_rotary_factor;
          j["num_nextn_predict_layers"] = c.mtp_layers;
          int64_t dense = 0;
          while (dense < c.layers && !c.sparse_layer(dense)) ++dense;
          j["first_k_dense_replace"] = dense;
          if (!c.moe()) return;
          j["n_routed_experts"] = c.experts;
          j["num_experts_per_tok"] = c.experts_per_token;
          j["moe_intermediate_size"] = c.expert_inner;
          j["norm_topk_prob"] = c.norm_topk_prob;
          j["n_shared_experts"] = c.shared_expert_inner / c.expert_inner;
          j["n_group"] = c.expert_choice->groups;
          j["topk_group"] = c.expert_choice->keep_groups;
          j["routed_scaling_factor"] = c.expert_choice->scale;
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
