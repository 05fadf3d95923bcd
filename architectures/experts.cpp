#include "architectures/experts.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace linnet {

using nlohmann::json;

void parse_experts(const ConfigReader& r, ModelConfig& c, const ExpertKeys& keys) {
  const std::string& type = c.model_type;
  const json& j = r.j;
  std::optional<int64_t> local, named;
  if (given(j, "num_local_experts")) local = r.positive("num_local_experts");
  if (given(j, "num_experts")) named = r.positive("num_experts");
  if (keys.local_only) {
    // MixtralConfig has num_local_experts only; a num_experts beside it is not read.
    if (named && named != local)
      r.fail(str("'num_experts' = ", *named, " is not read by transformers' Mixtral (it reads num_local_experts",
                 local ? str(" = ", *local) : str(", default ", keys.experts), ")"));
    c.experts = local.value_or(keys.experts);
  } else {
    // Qwen3-MoE and OLMoE read num_experts and num_local_experts as one attribute.
    if (local && named && *local != *named)
      r.fail(str("num_experts ", *named, " and num_local_experts ", *local, " disagree"));
    c.experts = local ? *local : named.value_or(keys.experts);
  }
  // Absent takes the family's default; null is not absent (transformers' top-k fails on it).
  if (j.contains("num_experts_per_tok") && j["num_experts_per_tok"].is_null())
    r.fail("'num_experts_per_tok' must be a positive integer, got null");
  c.experts_per_token = r.positive("num_experts_per_tok", keys.per_token);
  check_expert_counts(r, c);
  c.expert_inner = keys.inner_key ? r.positive("moe_intermediate_size", keys.inner) : c.inner;
  // Mixtral always renormalises its top-k weights (its router has no switch for it).
  c.norm_topk_prob = keys.always_normalized ? true : r.boolean("norm_topk_prob", keys.normalized_default);
  c.expert_names = keys.names;
  std::vector<bool> sparse(static_cast<size_t>(c.layers), true);
  if (keys.sparse_layer_keys) {
    // transformers: layer i has experts unless it is in mlp_only_layers, when
    // (i + 1) % decoder_sparse_step == 0; the others keep an MLP of intermediate_size.
    const int64_t step = r.positive("decoder_sparse_step", 1);
    for (int64_t i = 0; i < c.layers; ++i) sparse[static_cast<size_t>(i)] = (i + 1) % step == 0;
    if (given(j, "mlp_only_layers")) {
      const json& m = j["mlp_only_layers"];
      if (!m.is_array()) r.fail(str("'mlp_only_layers' must be a list of layer indices, got ", m.dump()));
      for (const json& v : m) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.layers)
          r.fail(str("'mlp_only_layers' must list layers in [0, ", c.layers, "), got ", m.dump()));
        sparse[static_cast<size_t>(v.get<int64_t>())] = false;
      }
    }
  } else {
    for (const char* key : {"decoder_sparse_step", "mlp_only_layers", "moe_intermediate_size"})
      if (given(j, key) && !(keys.inner_key && std::string(key) == "moe_intermediate_size")) r.fail(str("'", key, "' = ", j[key].dump(), " is not read for model_type '", type,
                                    "' (transformers reads it for qwen3_moe)"));
  }
  bool any = false;
  for (int64_t i = 0; i < c.layers; ++i) {
    c.layer_kinds[static_cast<size_t>(i)].sparse = sparse[static_cast<size_t>(i)];
    any = any || sparse[static_cast<size_t>(i)];
  }
  if (!any) c.experts = c.experts_per_token = c.expert_inner = 0;  // every layer dense: no experts at all
}

void write_experts(json& j, const ModelConfig& c, const ExpertKeys& keys) {
  if (!c.moe()) return;
  j[keys.local_only ? "num_local_experts" : "num_experts"] = c.experts;
  j["num_experts_per_tok"] = c.experts_per_token;
  if (!keys.always_normalized) j["norm_topk_prob"] = c.norm_topk_prob;
}

int64_t non_negative(const ConfigReader& r, const char* key, int64_t fallback) {
  if (!given(r.j, key)) return fallback;
  const json& v = r.j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= (int64_t{1} << 31))
    r.fail(str("'", key, "' must be a non-negative integer, got ", v.dump()));
  return v.get<int64_t>();
}

void check_expert_counts(const ConfigReader& r, const ModelConfig& c) {
  constexpr int64_t kMaxExperts = 1024;  // a router row sorts in one device thread's memory
  if (c.experts > kMaxExperts)
    r.fail(str(c.experts, " experts per layer are more than linnet's router takes (", kMaxExperts, ")"));
  if (c.experts_per_token > c.experts)
    r.fail(str("num_experts_per_tok ", c.experts_per_token, " is more than the ", c.experts, " experts"));
  if (c.experts_per_token > 64)
    r.fail(str("num_experts_per_tok ", c.experts_per_token, " is more than linnet's router takes (64)"));
}

void check_expert_groups(const ConfigReader& r, const ModelConfig& c, const ExpertChoice& ch) {
  if (c.experts % ch.groups != 0) r.fail(str("n_group ", ch.groups, " does not divide n_routed_experts ", c.experts));
  if (ch.keep_groups > ch.groups) r.fail(str("topk_group ", ch.keep_groups, " is more than n_group ", ch.groups));
  if (ch.group_top2 && ch.groups > 1 && c.experts / ch.groups < 2)
    r.fail(str("n_group ", ch.groups, " leaves groups of ", c.experts / ch.groups,
               " expert(s); a group's score sums its two best (torch.topk(2))"));
  if (c.experts_per_token > ch.keep_groups * (c.experts / ch.groups))
    r.fail(str("num_experts_per_tok ", c.experts_per_token, " is more than the ", ch.keep_groups * (c.experts / ch.groups),
               " experts of topk_group ", ch.keep_groups, " groups"));
}

void deepseek_dense_layers(const ConfigReader& r, ModelConfig& c, int64_t dense_default) {
  // transformers: layer i has experts when i ≥ first_k_dense_replace, else an MLP of intermediate_size.
  const int64_t dense = non_negative(r, "first_k_dense_replace", dense_default);
  for (int64_t i = 0; i < c.layers; ++i) c.layer_kinds[static_cast<size_t>(i)].sparse = i >= dense;
  if (dense >= c.layers) {  // every layer dense: no experts at all
    c.experts = c.experts_per_token = c.expert_inner = c.shared_expert_inner = 0;
    c.expert_choice.reset();
    c.router_bias = false;
  }
}

void parse_deepseek_experts(const ConfigReader& r, ModelConfig& c, const DeepSeekExpertDefaults& d) {
  const json& j = r.j;
  // Glm4MoeConfig and DeepseekV3Config map num_local_experts onto n_routed_experts; num_experts
  // they do not read.
  if (given(j, "num_experts"))
    r.fail(str("'num_experts' = ", j["num_experts"].dump(),
               " is not read by transformers' ", c.model_type, " (it reads n_routed_experts, or num_local_experts)"));
  std::optional<int64_t> routed, local;
  if (given(j, "n_routed_experts")) routed = r.positive("n_routed_experts");
  if (given(j, "num_local_experts")) local = r.positive("num_local_experts");
  if (routed && local && *routed != *local)
    r.fail(str("n_routed_experts ", *routed, " and num_local_experts ", *local, " disagree"));
  c.experts = routed ? *routed : local.value_or(d.experts);
  c.experts_per_token = r.positive("num_experts_per_tok", d.per_token);
  check_expert_counts(r, c);
  c.expert_inner = r.positive("moe_intermediate_size", d.inner);
  c.norm_topk_prob = r.boolean("norm_topk_prob", true);
  c.expert_names = ModelConfig::ExpertNames::qwen;
  c.shared_expert_inner = non_negative(r, "n_shared_experts", d.shared) * c.expert_inner;

  ExpertChoice ch;
  ch.sigmoid = true;
  ch.groups = r.positive("n_group", d.groups);
  ch.keep_groups = r.positive("topk_group", d.keep_groups);
  ch.group_top2 = true;
  ch.normalize = c.norm_topk_prob;
  ch.scale = static_cast<float>(r.number("routed_scaling_factor", d.scale));
  if (!(ch.scale > 0)) r.fail("'routed_scaling_factor' must be positive");
  check_expert_groups(r, c, ch);
  c.expert_choice = ch;
  c.router_bias = true;  // its router always has e_score_correction_bias
  deepseek_dense_layers(r, c, d.dense_layers);
  c.mtp_layers = non_negative(r, given(j, "num_nextn_predict_layers") ? "num_nextn_predict_layers" : "num_mtp_layers", 1);
}


void write_deepseek_experts(json& j, const ModelConfig& c) {
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
}

void write_sparse_layer_keys(json& j, const ModelConfig& c) {
  j["decoder_sparse_step"] = 1;
  json dense = json::array();
  for (int64_t i = 0; i < c.layers; ++i)
    if (!c.sparse_layer(i)) dense.push_back(i);
  j["mlp_only_layers"] = dense;
}

}  // namespace linnet
