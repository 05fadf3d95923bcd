#include "layers/decoder_builder.h"

#include <cmath>
#include <tuple>

namespace linnet {

// Layer i's attention: q/k/v as one column-parallel product over their stacked rows (the
// card's q_proj/k_proj/v_proj are views of them), o_proj row-parallel, the options' q/k
// norms, window, scale and soft-cap.
GroupedQueryAttention load_attention(WeightLoader& w, const ModelConfig& config, const Generics& g, int64_t i,
                                     int64_t shard) {
  const int64_t d = g.head_dim(), qh = g.heads_per_shard(), kvh = g.kv_heads_per_shard();
  const std::string a = "layers[" + std::to_string(i) + "].attention.";
  GroupedQueryAttention A;
  const AttentionOptions ao = config.attention_options(i);
  A.dims = AttentionDims{qh, kvh, d, g.max_seq, g.page_size};
  A.dims.round_kv = g.kv_dtype;  // a narrower cache: K and V rounded alike on every path
  A.dims.scale = ao.scale;
  A.dims.softcap = ao.softcap;
  if (ao.window) A.dims.window = *ao.window;
  A.rope = config.layer_kind(i).rope;
  A.qk_norm = ao.qk_norm;
  if (ao.qk_norm != QkNorm::none) {
    A.q_norm = w.norm(a + "q_norm.weight");
    A.k_norm = w.norm(a + "k_norm.weight");
    A.q_norm_width = g.heads * d;
    A.k_norm_width = g.kv_heads * d;
    A.k_squares_counted = shard % g.kv_replicas() == 0;
  }
  A.output_gate = config.attention_output_gate;
  const int64_t rq = qh * d * (A.output_gate ? 2 : 1), rk = kvh * d;  // gated: q_proj's heads are [q | gate]
  A.qkv_proj.weight = w.matrix(a + "qkv_proj.weight", {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
                               {rq + 2 * rk, g.hidden});
  if (config.qkv_bias) A.qkv_proj.bias = w.stacked({a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"});
  A.q_proj.weight = A.qkv_proj.weight.rows(0, rq);
  A.k_proj.weight = A.qkv_proj.weight.rows(rq, rq + rk);
  A.v_proj.weight = A.qkv_proj.weight.rows(rq + rk, rq + 2 * rk);
  if (config.qkv_bias) {
    A.q_proj.bias = A.qkv_proj.bias.rows(0, rq);
    A.k_proj.bias = A.qkv_proj.bias.rows(rq, rq + rk);
    A.v_proj.bias = A.qkv_proj.bias.rows(rq + rk, rq + 2 * rk);
  }
  A.o_proj.weight = w.matrix(a + "o_proj.weight", {a + "o_proj.weight"}, w.spec(a + "o_proj.weight").shard_shape());
  if (config.o_bias) A.o_proj.bias = w.param(a + "o_proj.bias");
  if (ao.sinks) A.sinks = w.param(a + "sinks");
  return A;
}

GatedDeltaNet load_gated_delta_net(WeightLoader& w, const ModelConfig& config, const Generics& g, int64_t i) {
  const LinearAttentionConfig& la = *config.linear_attention;
  const int64_t s = g.shards;
  const std::string a = "layers[" + std::to_string(i) + "].linear_attention.";
  GatedDeltaNet L;
  L.dims = DeltaNetDims{la.key_heads / s, la.key_dim, la.value_heads / s, la.value_dim};
  L.qkv_proj.weight = w.matrix(a + "qkv_proj.weight", {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
                               {L.dims.qkv_width(), g.hidden});
  L.z_proj.weight = w.matrix(a + "z_proj.weight", {a + "z_proj.weight"}, w.spec(a + "z_proj.weight").shard_shape());
  L.ba_proj.weight = w.matrix(a + "ba_proj.weight", {a + "b_proj.weight", a + "a_proj.weight"},
                              {2 * L.dims.value_heads, g.hidden});
  L.conv = w.table({a + "conv_q.weight", a + "conv_k.weight", a + "conv_v.weight"});
  L.a_log = w.param(a + "A_log");
  L.dt_bias = w.param(a + "dt_bias");
  L.norm = w.param(a + "norm.weight");  // a plain weight, not (1 + w): transformers' RMSNormGated
  L.norm_eps = static_cast<float>(config.rms_norm_eps);
  L.out_proj.weight = w.matrix(a + "out_proj.weight", {a + "out_proj.weight"}, w.spec(a + "out_proj.weight").shard_shape());
  return L;
}

LatentAttention load_latent_attention(WeightLoader& w, const ModelConfig& config, const Generics& g, int64_t i) {
  const LatentAttentionConfig& m = *config.mla;
  const int64_t hs = g.heads_per_shard(), h = g.hidden;
  const std::string a = "layers[" + std::to_string(i) + "].attention.";
  // DeepSeek's q_a_layernorm and kv_a_layernorm: RMSNorm's default eps, not the config's.
  constexpr float kLatentNormEps = 1e-6f;
  LatentAttention A;
  A.nope = m.nope;
  A.rope_dim = m.rope;
  A.kv_lora = m.kv_lora;
  A.v_dim = m.v;
  A.interleaved = m.interleaved;
  A.query_scale_beta = m.query_scale_beta;
  A.query_scale_period = m.query_scale_period;
  A.dims = AttentionDims{hs, 1, m.latent_head(), g.max_seq, g.page_size};
  A.dims.round_kv = g.kv_dtype;
  A.dims.scale = static_cast<float>(config.attention_scale.value_or(1.0 / std::sqrt(static_cast<double>(m.qk_head()))));
  A.rope = config.layer_kind(i).rope;
  auto linear = [&](const std::string& name, const Shape& shape, bool bias) {
    Linear l;
    l.weight = w.matrix(a + name + ".weight", {a + name + ".weight"}, shape);
    if (bias) l.bias = w.param(a + name + ".bias");
    return l;
  };
  if (m.q_lora > 0) {
    A.q_a_proj = linear("q_a_proj", {m.q_lora, h}, config.qkv_bias);
    A.q_a_norm = w.norm(a + "q_a_norm.weight");
    A.q_a_norm->eps = kLatentNormEps;
    A.q_b_proj = linear("q_b_proj", {hs * m.qk_head(), m.q_lora}, false);
  } else {
    A.q_b_proj = linear("q_proj", {hs * m.qk_head(), h}, false);
  }
  A.kv_a_proj = linear("kv_a_proj", {m.kv_lora + m.rope, h}, config.qkv_bias);
  A.kv_a_norm = w.norm(a + "kv_a_norm.weight");
  A.kv_a_norm.eps = kLatentNormEps;
  std::tie(A.w_uk, A.w_uv) = w.absorbed_kv_b(a + "kv_b_proj.weight", hs, m.nope, m.v, m.kv_lora);
  A.o_proj = linear("o_proj", {h, hs * m.v}, false);
  if (config.o_bias) A.o_proj.bias = w.param(a + "o_proj.bias");
  return A;
}

// gpt-oss's experts (card prefix m: "layers[i].mlp."): each one's gate_up rows interleaved
// (gate, up) as stored, its biases, the clamped SwiGLU. The biases of this rank's experts: rows
// [first, first + local) of the tables; under tensor sharding the down bias is added on shard
// 0 alone (the shards' partial sums are all-reduced).
SparseMoe load_gpt_oss_experts(WeightLoader& w, const ModelConfig& config, const Generics& g, const std::string& m,
                               int64_t shard, SparseMoe E) {
  const int64_t el = g.experts_per_shard(), ei = E.inner;
  std::vector<std::string> gate_up, down;
  for (int64_t e = E.first_expert; e < E.first_expert + el; ++e) {
    gate_up.push_back(m + "experts[" + std::to_string(e) + "].gate_up.weight");
    down.push_back(m + "experts[" + std::to_string(e) + "].down.weight");
  }
  E.gate_up.weight = w.matrix(m + "experts.gate_up.weight", gate_up, {el * 2 * ei, g.hidden});
  E.down.weight = w.matrix(m + "experts.down.weight", down, {el * g.hidden, ei});
  E.clamped = config.clamped_swiglu;
  E.gate_up_bias = w.table(m + "experts.gate_up.bias").rows(E.first_expert, E.first_expert + el);
  if (E.expert_parallel || shard == 0)
    E.down_bias = w.table(m + "experts.down.bias").rows(E.first_expert, E.first_expert + el);
  E.experts.resize(static_cast<size_t>(el));
  for (int64_t k = 0; k < el; ++k) {
    Expert& X = E.experts[static_cast<size_t>(k)];
    X.gate.weight = E.gate_up.weight.rows(2 * k * ei, (2 * k + 2) * ei);  // gate and up, interleaved
    X.down.weight = E.down.weight.rows(k * g.hidden, (k + 1) * g.hidden);
  }
  return E;
}

// Layer i's experts: this rank's (expert sharding) or every expert's slices (tensor
// sharding), each product over one stacked matrix with a group of rows per expert.
SparseMoe load_experts(WeightLoader& w, const ModelConfig& config, const Generics& g, int64_t i, int64_t shard) {
  SparseMoe E;
  const std::string m = "layers[" + std::to_string(i) + "].mlp.";
  E.router.top_k = g.top_k;
  E.router.normalize = config.norm_topk_prob;
  E.router.choice = config.expert_choice;
  // DeepSeek's router weight stays f32 (not packed in T): a plain upload of its f32 copy.
  E.router.gate.weight = config.expert_choice && !config.router_in_model_dtype
                             ? w.param(m + "router.weight")
                             : w.matrix(m + "router.weight", {m + "router.weight"}, {g.experts, g.hidden});
  if (config.router_in_model_dtype) E.router.round_to = g.t;
  const bool gpt_oss = config.expert_names == ModelConfig::ExpertNames::gpt_oss;
  if (gpt_oss) {  // its router's bias; its logits in T (transformers: F.linear in the model's dtype)
    E.router.gate.bias = w.param(m + "router.bias");
    E.router.round_to = g.t;
  }
  if (config.router_bias) E.router.bias = w.param(m + "router.e_score_correction_bias");
  if (g.shared_inner > 0) E.shared = load_swiglu(w, config, m + "shared.", g.shared_inner_per_shard(), false);
  if (config.shared_expert_gate)
    E.shared_gate.weight = w.matrix(m + "shared_gate.weight", {m + "shared_gate.weight"}, {1, g.hidden});
  E.num_experts = g.experts;
  E.first_expert = g.expert_begin(shard);
  E.inner = g.expert_inner_per_shard();
  E.expert_parallel = g.expert_parallel();
  const int64_t el = g.experts_per_shard(), ei = E.inner;
  if (gpt_oss) return load_gpt_oss_experts(w, config, g, m, shard, std::move(E));
  std::vector<std::string> gate_up, down;
  for (int64_t e = E.first_expert; e < E.first_expert + el; ++e) {
    const std::string x = m + "experts[" + std::to_string(e) + "].";
    gate_up.push_back(x + "gate.weight");
    gate_up.push_back(x + "up.weight");
    down.push_back(x + "down.weight");
  }
  E.gate_up.weight = w.matrix(m + "experts.gate_up.weight", gate_up, {el * 2 * ei, g.hidden});
  E.down.weight = w.matrix(m + "experts.down.weight", down, {el * g.hidden, ei});
  E.experts.resize(static_cast<size_t>(el));
  for (int64_t k = 0; k < el; ++k) {
    Expert& X = E.experts[static_cast<size_t>(k)];
    X.gate.weight = E.gate_up.weight.rows(2 * k * ei, (2 * k + 1) * ei);
    X.up.weight = E.gate_up.weight.rows((2 * k + 1) * ei, (2 * k + 2) * ei);
    X.down.weight = E.down.weight.rows(k * g.hidden, (k + 1) * g.hidden);
  }
  return E;
}

// A SwiGLU under card prefix m ("layers[i].mlp.", "layers[i].mlp.shared."): gate|up as one
// column-parallel product (the card's gate and up are views of its rows), down row-parallel.
SwiGlu load_swiglu(WeightLoader& w, const ModelConfig& config, const std::string& m, int64_t inner, bool biases) {
  SwiGlu M;
  M.options = config.mlp_options();
  M.gate_up.weight = w.matrix(m + "gate_up.weight", {m + "gate.weight", m + "up.weight"}, {2 * inner, config.hidden});
  if (biases) M.gate_up.bias = w.stacked({m + "gate.bias", m + "up.bias"});
  M.gate.weight = M.gate_up.weight.rows(0, inner);
  M.up.weight = M.gate_up.weight.rows(inner, 2 * inner);
  if (biases) {
    M.gate.bias = M.gate_up.bias.rows(0, inner);
    M.up.bias = M.gate_up.bias.rows(inner, 2 * inner);
  }
  M.down.weight = w.matrix(m + "down.weight", {m + "down.weight"}, w.spec(m + "down.weight").shard_shape());
  if (biases) M.down.bias = w.param(m + "down.bias");
  return M;
}

// Layer i's dense MLP.
SwiGlu load_mlp(WeightLoader& w, const ModelConfig& config, const Generics& g, int64_t i) {
  return load_swiglu(w, config, "layers[" + std::to_string(i) + "].mlp.", g.inner_per_shard(), config.mlp_bias);
}

// Layer i: its norms around the blocks, attention, and the dense MLP or the experts.
DecoderLayer decoder_layer(WeightLoader& w, const ModelConfig& config, const Generics& g, int64_t i,
                                int64_t shard) {
  const std::string p = "layers[" + std::to_string(i) + "].";
  DecoderLayer L;
  if (config.pre_norms) {
    L.attention_norm = w.norm(p + "attention_norm.weight");
    L.mlp_norm = w.norm(p + "mlp_norm.weight");
  }
  if (config.post_norms) {
    L.post_attention_norm = w.norm(p + "post_attention_norm.weight");
    L.post_mlp_norm = w.norm(p + "post_mlp_norm.weight");
  }
  L.residual_multiplier = static_cast<float>(config.residual_multiplier);
  if (config.linear_layer(i)) L.linear_attention = load_gated_delta_net(w, config, g, i);
  else if (config.mla) L.latent_attention = load_latent_attention(w, config, g, i);
  else L.attention = load_attention(w, config, g, i, shard);
  if (config.sparse_layer(i)) L.moe = load_experts(w, config, g, i, shard);
  else L.mlp = load_mlp(w, config, g, i);
  return L;
}

}  // namespace linnet
