// DeepSeek V3 / R1 / V3.1 and Kimi K2 (DeepseekV3ForCausalLM): multi-head latent attention
// (layers/latent_attention.h) — q through q_a_proj → q_a_layernorm → q_b_proj (or q_proj when
// q_lora_rank is null), the latent kv_a_proj_with_mqa → [c_kv | k_pe] → kv_a_layernorm, keys
// and values through kv_b_proj, RoPE on qk_rope_head_dim columns (interleaved pairs under
// rope_interleave, the default), yarn's mscale in the softmax scale — and DeepSeek's experts
// as GLM-4.5 has them (sigmoid scores, e_score_correction_bias, groups, shared experts, the
// first first_k_dense_replace layers dense). Multi-token-prediction layers are skipped at load.
#include <cmath>
#include <nlohmann/json.hpp>

#include "architectures/architecture.h"
#include "architectures/experts.h"

namespace linnet {

namespace {

using nlohmann::json;

// The latent attention's sizes (DeepseekV3Config's defaults where absent). transformers sets
// head_dim to qk_rope_head_dim itself; a head_dim in the file is not read.
void latent_keys(const ConfigReader& r, ModelConfig& c) {
  const json& j = r.j;
  LatentAttentionConfig m;
  // q_lora_rank null: one q_proj (DeepSeek-V2-Lite); absent: the class's 1536.
  m.q_lora = j.contains("q_lora_rank") && j["q_lora_rank"].is_null() ? 0 : r.positive("q_lora_rank", 1536);
  m.kv_lora = r.positive("kv_lora_rank", 512);
  m.nope = r.positive("qk_nope_head_dim", 128);
  m.rope = r.positive("qk_rope_head_dim", 64);
  m.v = r.positive("v_head_dim", 128);
  if (m.rope % 2 != 0) r.fail(str("qk_rope_head_dim ", m.rope, " must be even for RoPE"));
  m.interleaved = r.boolean("rope_interleave", true);
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

void write_latent(json& j, const ModelConfig& c) {
  const LatentAttentionConfig& m = *c.mla;
  j["q_lora_rank"] = m.q_lora > 0 ? json(m.q_lora) : json(nullptr);
  j["kv_lora_rank"] = m.kv_lora;
  j["qk_nope_head_dim"] = m.nope;
  j["qk_rope_head_dim"] = m.rope;
  j["v_head_dim"] = m.v;
  j["rope_interleave"] = m.interleaved;
  j.erase("head_dim");
}

}  // namespace

extern const Architecture kDeepseekV3{
    .model_type = "deepseek_v3",
    .class_name = "DeepseekV3ForCausalLM",
    .rms_norm_eps = 1e-6,
    .experts = true,
    .bias = Architecture::Bias::attention_bias,
    .attention = latent_keys,
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
    .definition = {.parameters =
                       [](const ModelConfig& c, const Generics& g) {
                         return decoder_parameters(c, g, [](ParamTable& t, const ModelConfig& c, int64_t i) {
                           pre_norm_layer(t, c, i);
                         });
                       },
                   .blocks = [](const ModelConfig& c) { return card::family_blocks(c, {.ns = "deepseek_v3"}); }},
};

}  // namespace linnet
