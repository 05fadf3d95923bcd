#include "layers/parameter_table.h"

#include <tuple>

namespace linnet {

void ParamTable::add(std::string hf, std::string card, Shape full, Split split, int64_t per_shard, bool bias) {
  p_.push_back(ParamSpec{std::move(hf), std::move(card), std::move(full), split, per_shard, bias, Shape{}, 0, -1});
}

void ParamTable::add_linear(std::string hf, std::string card, Shape full, Split split, int64_t per_shard) {
  add(std::move(hf), std::move(card), std::move(full), split, per_shard);
  stored_as_checkpoint_says(p_.back());
}

void ParamTable::add_part(std::string hf, std::string card, Shape full, Shape stored, int64_t offset,
                          int64_t per_shard) {
  p_.push_back(ParamSpec{std::move(hf), std::move(card), std::move(full), Split::rows, per_shard, false,
                         std::move(stored), offset, -1});
  stored_as_checkpoint_says(p_.back());
}

void ParamTable::add_part(std::string hf, std::string card, Shape full, Shape stored, int64_t offset, Split split,
                          int64_t per_shard) {
  add_part(std::move(hf), std::move(card), std::move(full), std::move(stored), offset, per_shard);
  p_.back().split = split;
}

void ParamTable::stored_as_checkpoint_says(ParamSpec& p) const {
  if (!c_.quantization) return;
  const std::string suffix = ".weight";
  const std::string module = p.hf_name.ends_with(suffix) ? p.hf_name.substr(0, p.hf_name.size() - suffix.size()) : p.hf_name;
  const WeightLayout* layout = c_.quantization->layout_of(module);
  if (!layout) return;
  p.layout = *layout;
  p.dtype = p.layout.data_dtype;
}

void ParamTable::embedding() {
  add("model.embed_tokens.weight", "embedding.weight", {g_.vocab, g_.hidden}, Split::mirrored, 0);
}

void ParamTable::layer(int64_t i) {
  hf_ = "model.layers." + std::to_string(i) + ".";
  card_ = "layers[" + std::to_string(i) + "].";
}

void ParamTable::norm(const std::string& hf_name, const std::string& card_name) {
  add(hf_ + hf_name + ".weight", card_ + card_name + ".weight", {g_.hidden}, Split::mirrored, 0);
}

void ParamTable::attention(bool fused_qkv) {
  const QkNorm qk_norm = c_.qk_norm;
  const int64_t h = g_.hidden, d = g_.head_dim(), s = g_.shards;
  // k/v rows: KvHeads/Shards heads a shard, or one head on each of kv_replicas() shards.
  const int64_t kv_rows = g_.kv_heads_per_shard() * d;
  auto replicate_kv = [&] { p_.back().replicas = g_.kv_replicas(); };
  // With an output gate (Qwen3.5, Qwen3-Next) q_proj holds per head [q | gate]: 2·D rows a head.
  const int64_t q_width = c_.attention_output_gate ? 2 * d : d;
  const std::pair<const char*, int64_t> qkv[] = {{"q_proj", g_.heads}, {"k_proj", g_.kv_heads}, {"v_proj", g_.kv_heads}};
  int64_t offset = 0;
  const Shape fused = {(g_.heads + 2 * g_.kv_heads) * d, h};
  for (auto [name, heads] : qkv) {
    const std::string w = std::string("self_attn.") + name, cw = std::string("attention.") + name;
    const bool kv = name[0] != 'q';  // k_proj, v_proj
    const int64_t rows = kv ? kv_rows : heads / s * q_width;
    const int64_t width = kv ? d : q_width;
    if (fused_qkv)
      add_part(hf_ + "self_attn.qkv_proj.weight", card_ + cw + ".weight", {heads * d, h}, fused, offset, rows);
    else
      add_linear(hf_ + w + ".weight", card_ + cw + ".weight", {heads * width, h}, Split::rows, rows);
    if (kv) replicate_kv();
    if (c_.qkv_bias) {
      add(hf_ + w + ".bias", card_ + cw + ".bias", {heads * width}, Split::rows, rows, true);
      if (kv) replicate_kv();
    }
    offset += heads * d;
  }
  if (qk_norm == QkNorm::per_head) {
    add(hf_ + "self_attn.q_norm.weight", card_ + "attention.q_norm.weight", {d}, Split::mirrored, 0);
    add(hf_ + "self_attn.k_norm.weight", card_ + "attention.k_norm.weight", {d}, Split::mirrored, 0);
  } else if (qk_norm == QkNorm::whole) {
    // One norm over the whole projection, split with it (its sum of squares is all-reduced in
    // the layer).
    add(hf_ + "self_attn.q_norm.weight", card_ + "attention.q_norm.weight", {g_.heads * d}, Split::rows,
        g_.heads / s * d);
    add(hf_ + "self_attn.k_norm.weight", card_ + "attention.k_norm.weight", {g_.kv_heads * d}, Split::rows, kv_rows);
    replicate_kv();
  }
  add_linear(hf_ + "self_attn.o_proj.weight", card_ + "attention.o_proj.weight", {h, g_.heads * d}, Split::columns,
             g_.heads / s * d);
  if (c_.o_bias) add(hf_ + "self_attn.o_proj.bias", card_ + "attention.o_proj.bias", {h}, Split::mirrored, 0, true);
  if (c_.attention_sinks) {  // gpt-oss: one logit per q head, split with the heads, held in f32
    add(hf_ + "self_attn.sinks", card_ + "attention.sinks", {g_.heads}, Split::rows, g_.heads / s);
    p_.back().dtype = DType::f32;
  }
}

void ParamTable::linear_attention() {
  const LinearAttentionConfig& la = *c_.linear_attention;
  const int64_t h = g_.hidden, s = g_.shards, kw = la.key_width(), vw = la.value_width(), hv = la.value_heads;
  const std::string a = hf_ + "linear_attn.", ca = card_ + "linear_attention.";
  if (la.grouped_projections) {
    // Qwen3-Next: in_proj_qkvz [Hk·(2·dk + 2·g·dv), H] holds per key head [q | k | v_group |
    // z_group] (g = value heads per key head), in_proj_ba [Hk·2g, H] per key head [b | a]: each
    // part a strided one, its blocks a head's (a shard's rows: whole key heads).
    const int64_t dk = la.key_dim, gv = hv / la.key_heads * la.value_dim, g = hv / la.key_heads;
    const int64_t stride = 2 * dk + 2 * gv;
    const Shape qkvz{la.key_heads * stride, h}, ba{la.key_heads * 2 * g, h};
    auto strided = [&](const std::string& hf, const char* part, int64_t rows, const Shape& stored, int64_t offset,
                       int64_t block, int64_t step) {
      add_part(a + hf, ca + part, {rows, h}, stored, offset, rows / s);
      p_.back().row_block = block;
      p_.back().row_stride = step;
    };
    strided("in_proj_qkvz.weight", "q_proj.weight", kw, qkvz, 0, dk, stride);
    strided("in_proj_qkvz.weight", "k_proj.weight", kw, qkvz, dk, dk, stride);
    strided("in_proj_qkvz.weight", "v_proj.weight", vw, qkvz, 2 * dk, gv, stride);
    strided("in_proj_qkvz.weight", "z_proj.weight", vw, qkvz, 2 * dk + gv, gv, stride);
    strided("in_proj_ba.weight", "b_proj.weight", hv, ba, 0, g, 2 * g);
    strided("in_proj_ba.weight", "a_proj.weight", hv, ba, g, g, 2 * g);
  } else {
    // in_proj_qkv [2·Kw + Vw, H]: its q, k and v row ranges, each split by heads.
    const Shape qkv{2 * kw + vw, h};
    add_part(a + "in_proj_qkv.weight", ca + "q_proj.weight", {kw, h}, qkv, 0, kw / s);
    add_part(a + "in_proj_qkv.weight", ca + "k_proj.weight", {kw, h}, qkv, kw, kw / s);
    add_part(a + "in_proj_qkv.weight", ca + "v_proj.weight", {vw, h}, qkv, 2 * kw, vw / s);
    add_linear(a + "in_proj_z.weight", ca + "z_proj.weight", {vw, h}, Split::rows, vw / s);
    add_linear(a + "in_proj_b.weight", ca + "b_proj.weight", {hv, h}, Split::rows, hv / s);
    add_linear(a + "in_proj_a.weight", ca + "a_proj.weight", {hv, h}, Split::rows, hv / s);
  }
  // conv1d.weight [C, 1, K] seen as [C, K]: the q, k and v channels, split as their rows are (a
  // convolution, never quantized: no stored_as_checkpoint_says).
  const Shape conv{la.conv_channels(), la.conv_kernel};
  int64_t offset = 0;
  for (auto [part, rows] : {std::pair{"conv_q.weight", kw}, {"conv_k.weight", kw}, {"conv_v.weight", vw}}) {
    p_.push_back(ParamSpec{a + "conv1d.weight", ca + part, {rows, la.conv_kernel}, Split::rows, rows / s, false, conv,
                           offset, -1});
    offset += rows;
  }
  add(a + "dt_bias", ca + "dt_bias", {hv}, Split::rows, hv / s);
  add(a + "A_log", ca + "A_log", {hv}, Split::rows, hv / s);
  add(a + "norm.weight", ca + "norm.weight", {la.value_dim}, Split::mirrored, 0);  // per head
  add_linear(a + "out_proj.weight", ca + "out_proj.weight", {h, vw}, Split::columns, vw / s);
}

void ParamTable::latent_attention() {
  const LatentAttentionConfig& m = *c_.mla;
  const int64_t h = g_.hidden, hs = g_.heads / g_.shards, qk = m.qk_head();
  const std::string a = hf_ + "self_attn.", ca = card_ + "attention.";
  if (m.q_lora > 0) {
    add_linear(a + "q_a_proj.weight", ca + "q_a_proj.weight", {m.q_lora, h}, Split::mirrored, 0);
    if (c_.qkv_bias) add(a + "q_a_proj.bias", ca + "q_a_proj.bias", {m.q_lora}, Split::mirrored, 0, true);
    add(a + "q_a_layernorm.weight", ca + "q_a_norm.weight", {m.q_lora}, Split::mirrored, 0);
    add_linear(a + "q_b_proj.weight", ca + "q_b_proj.weight", {g_.heads * qk, m.q_lora}, Split::rows, hs * qk);
  } else {
    add_linear(a + "q_proj.weight", ca + "q_proj.weight", {g_.heads * qk, h}, Split::rows, hs * qk);
  }
  add_linear(a + "kv_a_proj_with_mqa.weight", ca + "kv_a_proj.weight", {m.kv_lora + m.rope, h}, Split::mirrored, 0);
  if (c_.qkv_bias) add(a + "kv_a_proj_with_mqa.bias", ca + "kv_a_proj.bias", {m.kv_lora + m.rope}, Split::mirrored, 0, true);
  add(a + "kv_a_layernorm.weight", ca + "kv_a_norm.weight", {m.kv_lora}, Split::mirrored, 0);
  add_linear(a + "kv_b_proj.weight", ca + "kv_b_proj.weight", {g_.heads * (m.nope + m.v), m.kv_lora}, Split::rows,
             hs * (m.nope + m.v));
  p_.back().held_dequantized = true;  // held absorbed, in T (layers/latent_attention.h)
  add_linear(a + "o_proj.weight", ca + "o_proj.weight", {h, g_.heads * m.v}, Split::columns, hs * m.v);
  if (c_.o_bias) add(a + "o_proj.bias", ca + "o_proj.bias", {h}, Split::mirrored, 0, true);
}

void ParamTable::dense_mlp(bool fused_gate_up) {
  const int64_t h = g_.hidden, inner = g_.inner, s = g_.shards;
  int64_t offset = 0;
  for (const char* name : {"gate", "up"}) {
    const std::string w = std::string("mlp.") + name + "_proj", cw = std::string("mlp.") + name;
    if (fused_gate_up)
      add_part(hf_ + "mlp.gate_up_proj.weight", card_ + cw + ".weight", {inner, h}, {2 * inner, h}, offset, inner / s);
    else
      add_linear(hf_ + w + ".weight", card_ + cw + ".weight", {inner, h}, Split::rows, inner / s);
    if (c_.mlp_bias) add(hf_ + w + ".bias", card_ + cw + ".bias", {inner}, Split::rows, inner / s, true);
    offset += inner;
  }
  add_linear(hf_ + "mlp.down_proj.weight", card_ + "mlp.down.weight", {h, inner}, Split::columns, inner / s);
  if (c_.mlp_bias) add(hf_ + "mlp.down_proj.bias", card_ + "mlp.down.bias", {h}, Split::mirrored, 0, true);
}

void ParamTable::experts(const ExpertTensorNames& names) {
  const int64_t h = g_.hidden, ei = g_.expert_inner, s = g_.shards;
  const std::string m = hf_ + names.block + ".";
  // The router stays in the checkpoint's dtype: transformers' FP8 converts nn.Linear modules,
  // and its routers are not (Qwen3-MoE, Mixtral, OLMoE: a TopKRouter of their own). DeepSeek's
  // router is kept in f32 (its weight and e_score_correction_bias: transformers'
  // _keep_in_fp32_modules_strict), whatever the model's dtype.
  add(m + (names.gpt_oss ? "router" : "gate") + ".weight", card_ + "mlp.router.weight", {g_.experts, h},
      Split::mirrored, 0);
  if (c_.expert_choice && !c_.router_in_model_dtype) p_.back().dtype = DType::f32;
  if (names.gpt_oss) add(m + "router.bias", card_ + "mlp.router.bias", {g_.experts}, Split::mirrored, 0);
  if (c_.router_bias) {
    add(m + "gate.e_score_correction_bias", card_ + "mlp.router.e_score_correction_bias", {g_.experts},
        Split::mirrored, 0);
    p_.back().dtype = DType::f32;
  }
  // Shared experts: one SwiGLU of SharedInner beside the routed ones, sliced as the MLP is.
  if (g_.shared_inner > 0) {
    const int64_t si = g_.shared_inner;
    const std::string se = m + names.shared + ".";
    add_linear(se + "gate_proj.weight", card_ + "mlp.shared.gate.weight", {si, h}, Split::rows, si / s);
    add_linear(se + "up_proj.weight", card_ + "mlp.shared.up.weight", {si, h}, Split::rows, si / s);
    add_linear(se + "down_proj.weight", card_ + "mlp.shared.down.weight", {h, si}, Split::columns, si / s);
    if (c_.shared_expert_gate)  // one logit a token, on every shard
      add_linear(m + "shared_expert_gate.weight", card_ + "mlp.shared_gate.weight", {1, h}, Split::mirrored, 0);
  }
  if (names.gpt_oss) {
    // Expert e's gate_up [2·ExpertInner, H] (rows interleaved: gate 2i, up 2i + 1) is the
    // transpose of rows [e·H, (e + 1)·H) of gate_up_proj seen as [Experts·H, 2·ExpertInner];
    // its down [H, ExpertInner] of rows [e·ExpertInner, (e + 1)·ExpertInner) of down_proj. Under
    // tensor sharding a shard takes whole (gate, up) pairs: rows [s·2I/S, (s + 1)·2I/S). In
    // MXFP4 (gpt-oss as it ships) the experts are stored with their rows the outputs:
    // gate_up_proj_blocks [E, 2·ExpertInner, H/32, 16], rows [e·2I, (e + 1)·2I) its gate_up.
    const std::string gu = m + "experts.gate_up_proj", dn = m + "experts.down_proj";
    const bool rows_out = c_.quantization && c_.quantization->layout_of(gu);
    const Shape gu_2d = rows_out ? Shape{g_.experts * 2 * ei, h} : Shape{g_.experts * h, 2 * ei},
                dn_2d = rows_out ? Shape{g_.experts * h, ei} : Shape{g_.experts * ei, h};
    for (int64_t e = 0; e < g_.experts; ++e) {
      const std::string ce = card_ + "mlp.experts[" + std::to_string(e) + "].";
      auto part = [&](const std::string& hf, const char* card, Shape full, const Shape& stored, int64_t offset,
                      Split sliced, int64_t per_shard) {
        if (g_.expert_parallel()) {
          add_part(hf, ce + card, std::move(full), stored, offset, Split::expert, 0);
          p_.back().owner = g_.expert_owner(e);
        } else {
          add_part(hf, ce + card, std::move(full), stored, offset, sliced, per_shard);
        }
        p_.back().transposed = !rows_out;
      };
      part(gu, "gate_up.weight", {2 * ei, h}, gu_2d, rows_out ? e * 2 * ei : e * h, Split::rows, 2 * ei / s);
      part(dn, "down.weight", {h, ei}, dn_2d, rows_out ? e * h : e * ei, Split::columns, ei / s);
    }
    // The biases of every expert, on every rank (sliced with the pairs under tensor sharding).
    if (g_.expert_parallel())
      add(gu + "_bias", card_ + "mlp.experts.gate_up.bias", {g_.experts, 2 * ei}, Split::mirrored, 0);
    else
      add(gu + "_bias", card_ + "mlp.experts.gate_up.bias", {g_.experts, 2 * ei}, Split::columns, 2 * ei / s);
    add(dn + "_bias", card_ + "mlp.experts.down.bias", {g_.experts, h}, Split::mirrored, 0);
    return;
  }
  if (names.fused) {
    // Expert e: rows [e·2·ExpertInner, … + ExpertInner) of gate_up_proj (gate), the next
    // ExpertInner (up), rows [e·H, (e + 1)·H) of down_proj.
    const std::string gu = m + "experts.gate_up_proj", dn = m + "experts.down_proj";
    const Shape gu_2d{g_.experts * 2 * ei, h}, dn_2d{g_.experts * h, ei};
    for (int64_t e = 0; e < g_.experts; ++e) {
      const std::string ce = card_ + "mlp.experts[" + std::to_string(e) + "].";
      // Held whole by its owner (expert sharding), or sliced as the MLP is (`sliced`: rows or columns).
      auto part = [&](const std::string& hf, const char* card, Shape full, const Shape& stored, int64_t offset,
                      Split sliced) {
        if (g_.expert_parallel()) {
          add_part(hf, ce + card, std::move(full), stored, offset, Split::expert, 0);
          p_.back().owner = g_.expert_owner(e);
        } else {
          add_part(hf, ce + card, std::move(full), stored, offset, sliced, ei / s);
        }
      };
      part(gu, "gate.weight", {ei, h}, gu_2d, e * 2 * ei, Split::rows);
      part(gu, "up.weight", {ei, h}, gu_2d, e * 2 * ei + ei, Split::rows);
      part(dn, "down.weight", {h, ei}, dn_2d, e * h, Split::columns);
    }
    return;
  }
  for (int64_t e = 0; e < g_.experts; ++e) {
    const std::string he = m + "experts." + std::to_string(e) + ".";
    const std::string ce = card_ + "mlp.experts[" + std::to_string(e) + "].";
    const std::string gate = he + names.gate + ".weight", up = he + names.up + ".weight",
                      down = he + names.down + ".weight";
    if (g_.expert_parallel()) {
      for (auto [hf_name, card_name, shape] : {std::tuple{gate, ce + "gate.weight", Shape{ei, h}},
                                               {up, ce + "up.weight", Shape{ei, h}},
                                               {down, ce + "down.weight", Shape{h, ei}}}) {
        add_linear(hf_name, card_name, shape, Split::expert, 0);
        p_.back().owner = g_.expert_owner(e);
      }
    } else {
      add_linear(gate, ce + "gate.weight", {ei, h}, Split::rows, ei / s);
      add_linear(up, ce + "up.weight", {ei, h}, Split::rows, ei / s);
      add_linear(down, ce + "down.weight", {h, ei}, Split::columns, ei / s);
    }
  }
}

void ParamTable::final_norm_and_head() {
  add("model.norm.weight", "norm.weight", {g_.hidden}, Split::mirrored, 0);
  add(c_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", "lm_head.weight",
      {g_.vocab, g_.hidden}, Split::rows, g_.vocab_per_shard());
}

std::vector<ParamSpec> decoder_parameters(const ModelConfig& c, const Generics& g, LayerParameters layer) {
  ParamTable t(c, g);
  t.embedding();
  for (int64_t i = 0; i < g.layers; ++i) {
    t.layer(i);
    layer(t, c, i);
  }
  t.final_norm_and_head();
  return t.take();
}

void pre_norm_layer(ParamTable& t, const ModelConfig& c, int64_t i, const ExpertTensorNames& experts) {
  t.norm("input_layernorm", "attention_norm");
  if (c.linear_layer(i)) t.linear_attention();
  else if (c.mla) t.latent_attention();
  else t.attention();
  // transformers' post_attention_layernorm is Llama's norm before the MLP.
  t.norm("post_attention_layernorm", "mlp_norm");
  if (c.sparse_layer(i))
    t.experts(experts);
  else
    t.dense_mlp();
}

std::vector<ParamSpec> llama_parameters(const ModelConfig& c, const Generics& g) {
  return decoder_parameters(c, g, [](ParamTable& t, const ModelConfig& c, int64_t i) { pre_norm_layer(t, c, i); });
}

}  // namespace linnet
