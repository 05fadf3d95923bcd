// The mixture-of-experts keys as the MoE architectures' config classes read them (Mixtral,
// Qwen3-MoE, OLMoE): how many experts, how many a token takes, their inner size, whether the
// chosen weights are renormalised, and which layers have them.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>

#include "architectures/config_reader.h"

namespace linnet {

struct ExpertKeys {
  bool local_only = false;          // reads num_local_experts alone (Mixtral); else it and num_experts as one
  int64_t experts = 64;             // their defaults
  int64_t per_token = 8;
  bool inner_key = false;           // moe_intermediate_size (default `inner`); else intermediate_size
  int64_t inner = 768;
  bool always_normalized = false;   // TopK weights always renormalised (no norm_topk_prob)
  bool normalized_default = false;  // norm_topk_prob when absent (Qwen3-Next: true)
  bool sparse_layer_keys = false;   // decoder_sparse_step and mlp_only_layers (Qwen3-MoE)
  ModelConfig::ExpertNames names = ModelConfig::ExpertNames::qwen;
};

void parse_experts(const ConfigReader& r, ModelConfig& c, const ExpertKeys& keys);

// DeepSeek's experts as GLM-4.5's and DeepSeek V3's config classes read them (n_routed_experts
// or num_local_experts, n_shared_experts, n_group, topk_group, routed_scaling_factor,
// first_k_dense_replace, num_nextn_predict_layers): sigmoid scores, groups scored by their two
// best, e_score_correction_bias. The defaults are the config class's.
struct DeepSeekExpertDefaults {
  int64_t experts = 128, per_token = 8, inner = 1408, shared = 1, groups = 1, keep_groups = 1, dense_layers = 1;
  double scale = 1.0;
};
void parse_deepseek_experts(const ConfigReader& r, ModelConfig& c, const DeepSeekExpertDefaults& d);
// The pieces DeepSeek V2's reading (architectures/deepseek.cpp) shares with it, each rule once:
// the router's limits on Experts and TopK; n_group / topk_group against them (group_top2: a group
// scores its two best, so it needs two); the layers from first_k_dense_replace (default
// `dense`) sparse, none at all when every layer is dense; an integer key ≥ 0.
void check_expert_counts(const ConfigReader& r, const ModelConfig& c);
void check_expert_groups(const ConfigReader& r, const ModelConfig& c, const ExpertChoice& ch);
void deepseek_dense_layers(const ConfigReader& r, ModelConfig& c, int64_t dense);
int64_t non_negative(const ConfigReader& r, const char* key, int64_t fallback);
void write_deepseek_experts(nlohmann::json& j, const ModelConfig& c);
// num_experts (or num_local_experts), num_experts_per_tok and norm_topk_prob, as `keys` reads them.
void write_experts(nlohmann::json& j, const ModelConfig& c, const ExpertKeys& keys);
// decoder_sparse_step 1 and mlp_only_layers: the layers without experts (ExpertKeys::sparse_layer_keys).
void write_sparse_layer_keys(nlohmann::json& j, const ModelConfig& c);

}  // namespace linnet
