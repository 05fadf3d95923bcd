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
  constexpr int64_t kMaxExperts = 1024;  // a router row sorts in one device thread's memory
  if (c.experts > kMaxExperts)
    r.fail(str(c.experts, " experts per layer are more than linnet's router takes (", kMaxExperts, ")"));
  // Absent takes the family's default; null is not absent (transformers' top-k fails on it).
  if (j.contains("num_experts_per_tok") && j["num_experts_per_tok"].is_null())
    r.fail("'num_experts_per_tok' must be a positive integer, got null");
  c.experts_per_token = r.positive("num_experts_per_tok", keys.per_token);
  if (c.experts_per_token > c.experts)
    r.fail(str("num_experts_per_tok ", c.experts_per_token, " is more than the ", c.experts, " experts"));
  if (c.experts_per_token > 64)
    r.fail(str("num_experts_per_tok ", c.experts_per_token, " is more than linnet's router takes (64)"));
  c.expert_inner = keys.inner_key ? r.positive("moe_intermediate_size", 768) : c.inner;
  // Mixtral always renormalises its top-k weights (its router has no switch for it).
  c.norm_topk_prob = keys.always_normalized ? true : r.boolean("norm_topk_prob", false);
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
      if (given(j, key)) r.fail(str("'", key, "' = ", j[key].dump(), " is not read for model_type '", type,
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

}  // namespace linnet
