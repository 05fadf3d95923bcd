// DeepSeek V2 / V2-Lite (DeepseekV2ForCausalLM), DeepSeek V3 / R1 / V3.1 and Kimi K2
// (DeepseekV3ForCausalLM): multi-head latent attention
// (layers/latent_attention.h) — q through q_a_proj → q_a_layernorm → q_b_proj (or q_proj when
// q_lora_rank is null), the latent kv_a_proj_with_mqa → [c_kv | k_pe] → kv_a_layernorm, keys
// and values through kv_b_proj, RoPE on qk_rope_head_dim columns (interleaved pairs under
// rope_interleave, V3's default; always in V2, whose complex rotation pairs them), yarn's mscale
// in the softmax scale — and DeepSeek's experts: V3's as GLM-4.5 has them (sigmoid scores,
// e_score_correction_bias, groups scored by their two best, shared experts, the first
// first_k_dense_replace layers dense), V2's by softmax (topk_method greedy, or
// group_limited_greedy: groups scored by their best, the others' scores 0), never
// renormalised. V3's multi-token-prediction layers are skipped at load.
#include <cmath>
#include <nlohmann/json.hpp>

#include "architectures/architecture.h"
#include "architectures/experts.h"

namespace linnet {

namespace {

using nlohmann::json;

// The latent attention's sizes (DeepseekV3Config's defaults where absent). transformers sets
// head_dim to qk_rope_head_dim itself; a head_dim in the file is not read.
void latent_keys(const ConfigReader& r, ModelConfig& c, bool interleave_key) {
  const json& j = r.j;
  LatentAttentionConfig m;
  // q_lora_rank null: one q_proj (DeepSeek-V2-Lite); absent: the class's 1536.
  m.q_lora = j.contains("q_lora_rank") && j["q_lora_rank"].is_null() ? 0 : r.positive("q_lora_rank", 1536);
  m.kv_lora = r.positive("kv_lora_rank", 512);
  m.nope = r.positive("qk_nope_head_dim", 128);
  m.rope = r.positive("qk_rope_head_dim", 64);
  m.v = r.positive("v_head_dim", 128);
  if (m.rope % 2 != 0) r.fail(str("qk_rope_head_dim ", m.rope, " must be even for RoPE"));
  // V2 rotates pairs always (view_as_complex); V3 reads rope_interleave.
  m.interleaved = interleave_key ? r.boolean("rope_interleave", true) : true;
  // Keys and values are expanded per query head (kv_b_proj has Heads heads); transformers'
  // num_key_value_groups must then be 1.
  if (c.kv_heads != c.heads)
    r.fail(str("num_key_value_heads ", c.kv_heads, " differs from num_attention_heads ", c.heads,
               ": latent attention expands keys and values per query head"));
  c.mla = m;
  c.head_size = m.qk_head();
}

// The softmax scale: qk_head_dim^-½, times mscale² of yarn's mscale_all_dim (transformers'
// yarn_apply_mscale); set once the RoPE is read.
void latent_scale(const ConfigReader&, ModelConfig& c) {
  double scale = 1.0 / std::sqrt(static_cast<double>(c.mla->qk_head()));
  if (c.rope.type != RopeScaling::Type::none && c.rope.mscale_all_dim && *c.rope.mscale_all_dim != 0) {
    const double f = c.rope.factor, m = f <= 1 ? 1.0 : 0.1 * *c.rope.mscale_all_dim * std::log(f) + 1.0;
    scale *= m * m;
  }
  c.attention_scale = scale;
}

// DeepseekV2TopkRouter: softmax over every expert in f32, the top-k of the probabilities
// (greedy) or of those in the topk_group groups with the best single probability
// (group_limited_greedy; the others 0), weights = those probabilities × routed_scaling_factor.
// norm_topk_prob is not read by transformers' V2 (DeepSeek's own code read it): true is refused.
void deepseek_v2_experts(const ConfigReader& r, ModelConfig& c) {
  const json& j = r.j;
  // DeepseekV2Config maps num_experts onto n_routed_experts.
  std::optional<int64_t> routed, named;
  if (given(j, "n_routed_experts")) routed = r.positive("n_routed_experts");
  if (given(j, "num_experts")) named = r.positive("num_experts");
  if (routed && named && *routed != *named)
    r.fail(str("n_routed_experts ", *routed, " and num_experts ", *named, " disagree"));
  c.experts = routed ? *routed : named.value_or(64);
  if (c.experts > 1024) r.fail(str(c.experts, " experts per layer are more than linnet's router takes (1024)"));
  if (!given(j, "num_experts_per_tok")) r.fail("'num_experts_per_tok' is required (DeepseekV2Config has no default)");
  c.experts_per_token = r.positive("num_experts_per_tok");
  if (c.experts_per_token > c.experts)
    r.fail(str("num_experts_per_tok ", c.experts_per_token, " is more than the ", c.experts, " experts"));
  if (c.experts_per_token > 64)
    r.fail(str("num_experts_per_tok ", c.experts_per_token, " is more than linnet's router takes (64)"));
  c.expert_inner = r.positive("moe_intermediate_size", 1407);
  if (r.boolean("norm_topk_prob", false))
    r.fail("'norm_topk_prob' = true is not read by transformers' deepseek_v2 (its router never renormalises; "
           "DeepSeek's own code did): refused rather than guessed");
  c.norm_topk_prob = false;
  c.expert_names = ModelConfig::ExpertNames::qwen;
  const int64_t shared = given(j, "n_shared_experts") ? r.positive("n_shared_experts") : 2;
  c.shared_expert_inner = shared * c.expert_inner;
  ExpertChoice ch;
  ch.sigmoid = false;  // the router's softmax, computed before the choice
  ch.group_top2 = false;
  ch.masked = 0.0f;
  ch.weights_of_choices = true;
  ch.normalize = false;
  ch.scale = static_cast<float>(r.number("routed_scaling_factor", 1.0));
  if (!(ch.scale > 0)) r.fail("'routed_scaling_factor' must be positive");
  const std::string method = r.string("topk_method", "greedy");
  if (method == "group_limited_greedy") {
    if (!given(j, "n_group") || !given(j, "topk_group"))
      r.fail("topk_method group_limited_greedy needs n_group and topk_group");
    ch.groups = r.positive("n_group");
    ch.keep_groups = r.positive("topk_group");
    if (c.experts % ch.groups != 0) r.fail(str("n_group ", ch.groups, " does not divide n_routed_experts ", c.experts));
    if (ch.keep_groups > ch.groups) r.fail(str("topk_group ", ch.keep_groups, " is more than n_group ", ch.groups));
    if (c.experts_per_token > ch.keep_groups * (c.experts / ch.groups))
      r.fail(str("num_experts_per_tok ", c.experts_per_token, " is more than the ", ch.keep_groups * (c.experts / ch.groups),
                 " experts of topk_group ", ch.keep_groups, " groups"));
  } else if (method != "greedy") {
    r.fail(str("unsupported topk_method '", method, "' (transformers' deepseek_v2 reads greedy and group_limited_greedy)"));
  }
  c.expert_choice = ch;
  c.router_bias = false;
  // A layer has experts when i ≥ first_k_dense_replace (transformers reads no moe_layer_freq;
  // DeepSeek's own code did: anything but 1 is refused rather than guessed).
  if (given(j, "moe_layer_freq") && !(j["moe_layer_freq"].is_number_integer() && j["moe_layer_freq"].get<int64_t>() == 1))
    r.fail(str("'moe_layer_freq' = ", j["moe_layer_freq"].dump(),
               " is not read by transformers' deepseek_v2 (every layer from first_k_dense_replace has experts): "
               "refused rather than guessed"));
  int64_t dense = 0;
  if (given(j, "first_k_dense_replace")) {
    const json& v = j["first_k_dense_replace"];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) r.fail(str("'first_k_dense_replace' must be a non-negative integer, got ", v.dump()));
    dense = v.get<int64_t>();
  }
  for (int64_t i = 0; i < c.layers; ++i) c.layer_kinds[static_cast<size_t>(i)].sparse = i >= dense;
  if (dense >= c.layers) {
    c.experts = c.experts_per_token = c.expert_inner = c.shared_expert_inner = 0;
    c.expert_choice.reset();
  }
}

void write_deepseek_v2_experts(json& j, const ModelConfig& c) {
  int64_t dense = 0;
  while (dense < c.layers && !c.sparse_layer(dense)) ++dense;
  j["first_k_dense_replace"] = dense;
  if (!c.moe()) return;
  j["n_routed_experts"] = c.experts;
  j["num_experts_per_tok"] = c.experts_per_token;
  j["moe_intermediate_size"] = c.expert_inner;
  j["n_shared_experts"] = c.shared_expert_inner / c.expert_inner;
  j["routed_scaling_factor"] = c.expert_choice->scale;
  j["norm_topk_prob"] = false;
  if (c.expert_choice->groups > 1) {
    j["topk_method"] = "group_limited_greedy";
    j["n_group"] = c.expert_choice->groups;
    j["topk_group"] = c.expert_choice->keep_groups;
  } else {
    j["topk_method"] = "greedy";
  }
}

void write_latent(json& j, const ModelConfig& c) {
  const LatentAttentionConfig& m = *c.mla;
  j["q_lora_rank"] = m.q_lora > 0 ? json(m.q_lora) : json(nullptr);
  j["kv_lora_rank"] = m.kv_lora;
  j["qk_nope_head_dim"] = m.nope;
  j["qk_rope_head_dim"] = m.rope;
  j["v_head_dim"] = m.v;
  if (c.model_type == "deepseek_v3") j["rope_interleave"] = m.interleaved;
  j.erase("head_dim");
}

std::vector<ParamSpec> deepseek_parameters(const ModelConfig& c, const Generics& g) {
  return decoder_parameters(c, g, [](ParamTable& t, const ModelConfig& c, int64_t i) { pre_norm_layer(t, c, i); });
}

}  // namespace

extern const Architecture kDeepseekV3{
    .model_type = "deepseek_v3",
    .class_name = "DeepseekV3ForCausalLM",
    .rms_norm_eps = 1e-6,
    .experts = true,
    .bias = Architecture::Bias::attention_bias,
    .attention = [](const ConfigReader& r, ModelConfig& c) { latent_keys(r, c, true); },
    .layers = window_not_applied,
    .moe =
        [](const ConfigReader& r, ModelConfig& c) {
          parse_deepseek_experts(r, c, {.experts = 256, .per_token = 8, .inner = 2048, .shared = 1, .groups = 8,
                                        .keep_groups = 4, .dense_layers = 3, .scale = 2.5});
        },
    .finish = latent_scale,
    .write =
        [](json& j, const ModelConfig& c) {
          write_latent(j, c);
          write_deepseek_experts(j, c);
        },
    .definition = {.parameters = deepseek_parameters,
                   .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "deepseek_v3"}); }},
};

extern const Architecture kDeepseekV2{
    .model_type = "deepseek_v2",
    .class_name = "DeepseekV2ForCausalLM",
    .rms_norm_eps = 1e-6,
    .experts = true,
    .bias = Architecture::Bias::attention_bias,
    .attention = [](const ConfigReader& r, ModelConfig& c) { latent_keys(r, c, false); },
    .layers = window_not_applied,
    .moe = deepseek_v2_experts,
    .finish = latent_scale,
    .write =
        [](json& j, const ModelConfig& c) {
          write_latent(j, c);
          write_deepseek_v2_experts(j, c);
        },
    .definition = {.parameters = deepseek_parameters,
                   .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "deepseek_v2"}); }},
};

}  // namespace linnet
