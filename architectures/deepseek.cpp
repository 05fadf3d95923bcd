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
// The config classes' defaults of the latent sizes.
struct LatentDefaults {
  int64_t q_lora = 1536, kv_lora = 512, nope = 128, rope = 64, v = 128;
};

void latent_keys(const ConfigReader& r, ModelConfig& c, bool interleave_key, const LatentDefaults& d = {}) {
  const json& j = r.j;
  LatentAttentionConfig m;
  // q_lora_rank null: one q_proj (DeepSeek-V2-Lite); absent: the class's default.
  m.q_lora = j.contains("q_lora_rank") && j["q_lora_rank"].is_null() ? 0 : r.positive("q_lora_rank", d.q_lora);
  m.kv_lora = r.positive("kv_lora_rank", d.kv_lora);
  m.nope = r.positive("qk_nope_head_dim", d.nope);
  m.rope = r.positive("qk_rope_head_dim", d.rope);
  m.v = r.positive("v_head_dim", d.v);
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
  if (!given(j, "num_experts_per_tok")) r.fail("'num_experts_per_tok' is required (DeepseekV2Config has no default)");
  c.experts_per_token = r.positive("num_experts_per_tok");
  check_expert_counts(r, c);
  c.expert_inner = r.positive("moe_intermediate_size", 1407);
  if (r.boolean("norm_topk_prob", false))
    r.fail("'norm_topk_prob' = true is not read by transformers' deepseek_v2 (its router never renormalises; "
           "DeepSeek's own code did): refused rather than guessed");
  c.norm_topk_prob = false;
  c.expert_names = ModelConfig::ExpertNames::qwen;
  c.shared_expert_inner = non_negative(r, "n_shared_experts", 2) * c.expert_inner;
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
    check_expert_groups(r, c, ch);
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
  deepseek_dense_layers(r, c, 0);
}

void write_deepseek_v2_experts(json& j, const ModelConfig& c) {
  write_deepseek_experts(j, c);  // the keys V3's share, then V2's own
  j.erase("num_nextn_predict_layers");
  if (!c.moe()) return;
  j["norm_topk_prob"] = false;
  if (c.expert_choice->groups > 1) {
    j["topk_method"] = "group_limited_greedy";
  } else {
    j["topk_method"] = "greedy";
    j.erase("n_group");
    j.erase("topk_group");
  }
}

void write_latent(json& j, const ModelConfig& c) {
  const LatentAttentionConfig& m = *c.mla;
  j["q_lora_rank"] = m.q_lora > 0 ? json(m.q_lora) : json(nullptr);
  j["kv_lora_rank"] = m.kv_lora;
  j["qk_nope_head_dim"] = m.nope;
  j["qk_rope_head_dim"] = m.rope;
  j["v_head_dim"] = m.v;
  if (c.model_type != "deepseek_v2") j["rope_interleave"] = m.interleaved;
  j.erase("head_dim");
}

std::vector<ParamSpec> deepseek_parameters(const ModelConfig& c, const Generics& g) {
  return decoder_parameters(c, g, [](ParamTable& t, const ModelConfig& c, int64_t i) { pre_norm_layer(t, c, i); });
}

// Mistral 4 (Mistral4ForCausalLM): DeepSeek V3's latent attention with its own defaults, its
// RoPE over qk_rope_head_dim (partial_rotary_factor qk_rope / (qk_nope + qk_rope), which
// transformers sets itself), and Llama 4's query scaling by position (rope_parameters'
// llama_4_scaling_beta over original_max_position_embeddings: transformers multiplies by it
// unconditionally, so both are required). Its experts: DeepSeek's choice among the softmax's
// probabilities computed in the model's dtype (no f32 router, no e_score_correction_bias),
// groups by their two best, renormalised (norm_topk_prob), scaled, one shared expert; no
// multi-token-prediction layers.
void mistral4_keys(const ConfigReader& r, ModelConfig& c) {
  latent_keys(r, c, true, {.q_lora = 1024, .kv_lora = 256, .nope = 64, .rope = 64, .v = 128});
  const json& j = r.j;
  if (!given(j, "rope_parameters"))
    r.fail("mistral4 needs rope_parameters with llama_4_scaling_beta and original_max_position_embeddings (as "
           "transformers writes them; its query scaling reads both)");
  const json& rp = j["rope_parameters"];
  for (const char* k : {"llama_4_scaling_beta", "original_max_position_embeddings"})
    if (!rp.is_object() || !given(rp, k))
      r.fail(str("rope_parameters.", k, " is required for mistral4 (transformers' query scaling reads it)"));
  if (!rp["llama_4_scaling_beta"].is_number()) r.fail("rope_parameters.llama_4_scaling_beta must be a number");
  const json& period = rp["original_max_position_embeddings"];
  if (!period.is_number_integer() || period.get<int64_t>() < 1)
    r.fail(str("rope_parameters.original_max_position_embeddings must be a positive integer, got ", period.dump()));
  // Mistral4RotaryEmbedding's own default RoPE spans head_dim (qk_nope + qk_rope), not the
  // qk_rope_head_dim it rotates: transformers fails on it; the scaled kinds use the partial factor.
  const std::string type = rp.contains("rope_type") && rp["rope_type"].is_string() ? rp["rope_type"].get<std::string>()
                           : rp.contains("type") && rp["type"].is_string()         ? rp["type"].get<std::string>()
                                                                                   : "default";
  if (type == "default")
    r.fail("rope_parameters.rope_type default is not run by transformers' mistral4 (its default RoPE spans "
           "qk_nope_head_dim + qk_rope_head_dim and fails on the qk_rope_head_dim it rotates): give yarn, as Mistral "
           "4 ships");
  c.mla->query_scale_beta = rp["llama_4_scaling_beta"].get<float>();
  c.mla->query_scale_period = period.get<int64_t>();
  if (given(rp, "partial_rotary_factor") && rp["partial_rotary_factor"].is_number()) {
    const double want = static_cast<double>(c.mla->rope) / static_cast<double>(c.mla->qk_head());
    if (std::fabs(rp["partial_rotary_factor"].get<double>() - want) > 1e-12)
      r.fail(str("rope_parameters.partial_rotary_factor ", rp["partial_rotary_factor"].dump(),
                 " must be qk_rope_head_dim / (qk_nope_head_dim + qk_rope_head_dim) = ", want,
                 " (the RoPE covers qk_rope_head_dim)"));
  }
}

void mistral4_experts(const ConfigReader& r, ModelConfig& c) {
  parse_deepseek_experts(r, c, {.experts = 128, .per_token = 4, .inner = 2048, .shared = 1, .groups = 1,
                                .keep_groups = 1, .dense_layers = 0, .scale = 1.0});
  c.mtp_layers = 0;
  if (!c.expert_choice) return;
  c.expert_choice->sigmoid = false;  // softmax, in the model's dtype
  c.expert_choice->masked = 0.0f;    // masked_fill(0.0)
  c.router_bias = false;
  c.router_in_model_dtype = true;
}

}  // namespace

extern const Architecture kMistral4{
    .model_type = "mistral4",
    .class_name = "Mistral4ForCausalLM",
    .rms_norm_eps = 1e-6,
    .partial_rotary = true,
    .experts = true,
    .bias = Architecture::Bias::attention_bias,
    .attention = mistral4_keys,
    .layers = window_not_applied,
    .moe = mistral4_experts,
    .finish = latent_scale,
    .write =
        [](json& j, const ModelConfig& c) {
          write_latent(j, c);
          write_deepseek_experts(j, c);
          j.erase("num_nextn_predict_layers");
          // One rope_parameters object, as Mistral4Config writes it, with the query scaling's keys.
          json rp = c.rope.type == RopeScaling::Type::none ? json{{"rope_type", "default"}} : rope_json(c.rope);
          rp["rope_theta"] = c.rope_theta;
          j.erase("rope_scaling");
          j.erase("rope_theta");
          rp["llama_4_scaling_beta"] = c.mla->query_scale_beta;
          rp["original_max_position_embeddings"] = c.mla->query_scale_period;
          rp["partial_rotary_factor"] = static_cast<double>(c.mla->rope) / static_cast<double>(c.mla->qk_head());
          j["rope_parameters"] = rp;
          j.erase("partial_rotary_factor");
        },
    .definition = {.parameters =
                       [](const ModelConfig& c, const Generics& g) {
                         // Its experts in transformers' fused layout (no conversion splits them).
                         return decoder_parameters(c, g, [](ParamTable& t, const ModelConfig& c, int64_t i) {
                           pre_norm_layer(t, c, i, ExpertTensorNames{.fused = true});
                         });
                       },
                   .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "mistral4"}); }},
};

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
