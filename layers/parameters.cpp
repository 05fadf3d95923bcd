#include "layers/parameters.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"

namespace linnet {

const char* split_name(Split s) {
  switch (s) {
    case Split::mirrored: return "mirrored";
    case Split::rows: return "rows";
    case Split::columns: return "columns";
    case Split::expert: return "expert";
  }
  return "?";
}

Shape ParamSpec::shard_shape() const {
  Shape s = full;
  if (split == Split::rows) s[0] = per_shard;
  if (split == Split::columns) s[1] = per_shard;
  return s;
}

std::pair<int64_t, int64_t> ParamSpec::shard_range(int64_t shard) const {
  if (split == Split::mirrored || split == Split::expert) return {0, full[0]};
  const int64_t extent = split == Split::rows ? full[0] : full[1];
  const int64_t begin = std::min(shard / replicas * per_shard, extent);
  return {begin, std::min(begin + per_shard, extent)};
}

std::vector<ParamSpec> ParamSpec::companions() const {
  std::vector<ParamSpec> out;
  const std::vector<WeightCompanion> stored_parts = layout.companions_of(stored_shape());
  const std::vector<WeightCompanion> parts = layout.companions_of(full);
  for (size_t i = 0; i < parts.size(); ++i) {
    ParamSpec c = *this;
    c.hf_name += parts[i].suffix;
    c.card_name += parts[i].suffix;
    c.full = parts[i].shape;
    c.layout = WeightLayout{};
    c.dtype = parts[i].dtype;
    c.optional_bias = false;
    if (c.full.rank() == 1) {  // g_idx: one per input column, the stored tensor's
      c.stored = Shape{};
      c.row_offset = 0;
      if (split == Split::columns) c.split = Split::rows;  // its dimension 0 is the columns
      if (split == Split::rows) c.split = Split::mirrored, c.per_shard = 0, c.replicas = 1;
    } else {
      const int64_t b = layout.block(split == Split::columns ? 1 : 0);
      // Not whole blocks only where one shard holds it all (check_blocks refuses the rest).
      if (split == Split::rows || split == Split::columns) c.per_shard = (per_shard + b - 1) / b;
      if (stored.rank()) c.stored = stored_parts[i].shape, c.row_offset = row_offset / layout.block_rows;
    }
    out.push_back(std::move(c));
  }
  return out;
}

void ParamSpec::check_blocks(int64_t shards) const {
  if (full.rank() != 2 || (layout.block_rows == 1 && layout.block_cols == 1)) return;
  if (stored.rank()) check_block_boundaries(hf_name, layout, 0, row_offset, row_offset + full[0], stored[0]);
  if (split != Split::rows && split != Split::columns) return;
  const int dim = split == Split::columns ? 1 : 0;
  for (int64_t s = 0; s < shards; ++s) {
    const auto [begin, end] = shard_range(s);
    check_block_boundaries(hf_name, layout, dim, begin, end, full[dim]);
  }
}

void check_weight_layouts(const std::vector<ParamSpec>& specs, int64_t shards,
                          const std::function<bool(WeightFormat)>& supported, const std::string& backend) {
  for (const auto& p : specs) {
    if (!supported(p.layout.format))
      throw Error(str(p.hf_name, " is stored as ", weight_format_name(p.layout.format), ", which the ", backend,
                      " backend does not support"));
    p.check_blocks(shards);
  }
}

std::vector<ParamSpec> parameter_specs(const ModelConfig& c, const Generics& g) {
  const int64_t h = g.hidden, d = g.head_dim(), s = g.shards;
  std::vector<ParamSpec> p;
  auto add = [&](std::string hf, std::string card, Shape full, Split split, int64_t per_shard, bool bias = false) {
    p.push_back(ParamSpec{std::move(hf), std::move(card), std::move(full), split, per_shard, bias, Shape{}, 0, -1});
  };
  // A part of a fused tensor: rows [offset, offset + full[0]) of `stored`.
  auto add_part = [&](std::string hf, std::string card, Shape full, Shape stored, int64_t offset, int64_t per_shard) {
    p.push_back(ParamSpec{std::move(hf), std::move(card), std::move(full), Split::rows, per_shard, false,
                          std::move(stored), offset, -1});
  };
  // k/v rows: KvHeads/Shards heads a shard, or one head on each of kv_replicas() shards.
  const int64_t kv_rows = g.kv_heads_per_shard() * d;
  auto replicate_kv = [&] { p.back().replicas = g.kv_replicas(); };
  add("model.embed_tokens.weight", "embedding.weight", {g.vocab, h}, Split::mirrored, 0);
  for (int64_t i = 0; i < g.layers; ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".";
    const std::string card = "layers[" + std::to_string(i) + "].";
    // Norms around the blocks. transformers' names: Llama's post_attention_layernorm is the
    // norm before the MLP; Gemma's and OLMo 2's is the norm after attention.
    if (c.pre_norms) add(hf + "input_layernorm.weight", card + "attention_norm.weight", {h}, Split::mirrored, 0);
    if (c.post_norms)
      add(hf + "post_attention_layernorm.weight", card + "post_attention_norm.weight", {h}, Split::mirrored, 0);
    const std::pair<const char*, int64_t> qkv[] = {{"q_proj", g.heads}, {"k_proj", g.kv_heads}, {"v_proj", g.kv_heads}};
    int64_t offset = 0;
    const Shape fused = {(g.heads + 2 * g.kv_heads) * d, h};
    for (auto [name, heads] : qkv) {
      const std::string w = std::string("self_attn.") + name, cw = std::string("attention.") + name;
      const bool kv = name[0] != 'q';  // k_proj, v_proj
      const int64_t rows = kv ? kv_rows : heads / s * d;
      if (c.fused_qkv)
        add_part(hf + "self_attn.qkv_proj.weight", card + cw + ".weight", {heads * d, h}, fused, offset, rows);
      else
        add(hf + w + ".weight", card + cw + ".weight", {heads * d, h}, Split::rows, rows);
      if (kv) replicate_kv();
      if (c.qkv_bias) {
        add(hf + w + ".bias", card + cw + ".bias", {heads * d}, Split::rows, rows, true);
        if (kv) replicate_kv();
      }
      offset += heads * d;
    }
    if (c.qk_norm == ModelConfig::QkNorm::per_head) {
      add(hf + "self_attn.q_norm.weight", card + "attention.q_norm.weight", {d}, Split::mirrored, 0);
      add(hf + "self_attn.k_norm.weight", card + "attention.k_norm.weight", {d}, Split::mirrored, 0);
    } else if (c.qk_norm == ModelConfig::QkNorm::whole) {
      // OLMo 2: one norm over the whole projection, split with it (its sum of squares is
      // all-reduced in the layer).
      add(hf + "self_attn.q_norm.weight", card + "attention.q_norm.weight", {g.heads * d}, Split::rows, g.heads / s * d);
      add(hf + "self_attn.k_norm.weight", card + "attention.k_norm.weight", {g.kv_heads * d}, Split::rows, kv_rows);
      replicate_kv();
    }
    add(hf + "self_attn.o_proj.weight", card + "attention.o_proj.weight", {h, g.heads * d}, Split::columns,
        g.heads / s * d);
    if (c.o_bias) add(hf + "self_attn.o_proj.bias", card + "attention.o_proj.bias", {h}, Split::mirrored, 0, true);
    if (c.pre_norms)
      add(hf + (c.post_norms ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"),
          card + "mlp_norm.weight", {h}, Split::mirrored, 0);
    if (c.post_norms)
      add(hf + "post_feedforward_layernorm.weight", card + "post_mlp_norm.weight", {h}, Split::mirrored, 0);
    if (c.sparse_layer(i)) {
      // A mixture of experts: the router whole on every rank; each expert's gate/up/down held
      // whole by its owner (expert sharding) or sliced as the MLP is (tensor sharding).
      const bool mixtral = c.expert_names == ModelConfig::ExpertNames::mixtral;
      const std::string m = hf + (mixtral ? "block_sparse_moe." : "mlp.");
      add(m + "gate.weight", card + "mlp.router.weight", {g.experts, h}, Split::mirrored, 0);
      const int64_t ei = g.expert_inner;
      for (int64_t e = 0; e < g.experts; ++e) {
        const std::string he = m + "experts." + std::to_string(e) + ".";
        const std::string ce = card + "mlp.experts[" + std::to_string(e) + "].";
        const std::string gate = he + (mixtral ? "w1" : "gate_proj") + ".weight";
        const std::string up = he + (mixtral ? "w3" : "up_proj") + ".weight";
        const std::string down = he + (mixtral ? "w2" : "down_proj") + ".weight";
        if (g.expert_parallel()) {
          for (auto [hf_name, card_name, shape] : {std::tuple{gate, ce + "gate.weight", Shape{ei, h}},
                                                   {up, ce + "up.weight", Shape{ei, h}},
                                                   {down, ce + "down.weight", Shape{h, ei}}}) {
            add(hf_name, card_name, shape, Split::expert, 0);
            p.back().owner = g.expert_owner(e);
          }
        } else {
          add(gate, ce + "gate.weight", {ei, h}, Split::rows, ei / s);
          add(up, ce + "up.weight", {ei, h}, Split::rows, ei / s);
          add(down, ce + "down.weight", {h, ei}, Split::columns, ei / s);
        }
      }
      continue;
    }
    offset = 0;
    for (const char* name : {"gate", "up"}) {
      const std::string w = std::string("mlp.") + name + "_proj", cw = std::string("mlp.") + name;
      if (c.fused_gate_up)
        add_part(hf + "mlp.gate_up_proj.weight", card + cw + ".weight", {g.inner, h}, {2 * g.inner, h}, offset,
                 g.inner / s);
      else
        add(hf + w + ".weight", card + cw + ".weight", {g.inner, h}, Split::rows, g.inner / s);
      if (c.mlp_bias) add(hf + w + ".bias", card + cw + ".bias", {g.inner}, Split::rows, g.inner / s, true);
      offset += g.inner;
    }
    add(hf + "mlp.down_proj.weight", card + "mlp.down.weight", {h, g.inner}, Split::columns, g.inner / s);
    if (c.mlp_bias) add(hf + "mlp.down_proj.bias", card + "mlp.down.bias", {h}, Split::mirrored, 0, true);
  }
  add("model.norm.weight", "norm.weight", {h}, Split::mirrored, 0);
  add(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", "lm_head.weight", {g.vocab, h},
      Split::rows, g.vocab_per_shard());
  return p;
}

}  // namespace linnet
