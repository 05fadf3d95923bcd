// The pieces an architecture's parameter table is composed of (architectures/*.cpp): each adds
// its tensors to the table, in the order the architecture calls them (the order `linnet
// inspect` lists them in), with their shapes and splits (docs/entries.md "Weights and shards").
#pragma once
#include <string>
#include <vector>

#include "layers/parameters.h"

namespace linnet {

// Where a mixture of experts' tensors are: `block`.gate (the router) and
// `block`.experts.E.`gate`/`up`/`down`. Qwen3-MoE's and OLMoE's by default.
struct ExpertTensorNames {
  const char* block = "mlp";
  const char* gate = "gate_proj";
  const char* up = "up_proj";
  const char* down = "down_proj";
  // transformers 5's own layout, where no conversion splits it (Mistral 4): `block`.experts.
  // gate_up_proj [Experts, 2·ExpertInner, H] (each expert's gate rows, then its up rows) and
  // `block`.experts.down_proj [Experts, H, ExpertInner]; expert e's matrices are row ranges.
  bool fused = false;
  // gpt-oss's layout: `block`.router (weight and bias); `block`.experts.gate_up_proj [Experts, H,
  // 2·ExpertInner] — each expert's matrix transposed, its gate and up columns interleaved —
  // and down_proj [Experts, ExpertInner, H], transposed too; gate_up_proj_bias [Experts,
  // 2·ExpertInner] and down_proj_bias [Experts, H].
  bool gpt_oss = false;
  // The shared experts' module: `block`.`shared`.gate_proj/up_proj/down_proj (DeepSeek:
  // shared_experts; Qwen3.5-MoE, Qwen3-Next: shared_expert, with `block`.shared_expert_gate
  // beside it where ModelConfig::shared_expert_gate).
  const char* shared = "shared_experts";
};

class ParamTable {
 public:
  ParamTable(const ModelConfig& config, const Generics& g) : c_(config), g_(g) {}

  // model.embed_tokens: [Vocab, H], mirrored.
  void embedding();
  // The tensors that follow are layer i's (model.layers.i. / layers[i].).
  void layer(int64_t i);
  // One of the layer's norms, [H] mirrored: its transformers name ("input_layernorm") and its
  // place on the card ("attention_norm").
  void norm(const std::string& hf_name, const std::string& card_name);
  // q/k/v_proj (rows: Heads·D, KvHeads·D; k/v replicated when Shards > KvHeads), their biases
  // where the config has them (qkv_bias); the q/k norms; o_proj (columns) and its bias (o_bias).
  // fused_qkv: q/k/v are row ranges of one qkv_proj tensor (Phi-3). The q/k norms are the
  // config's (ModelConfig::qk_norm: the architecture states them once, when it parses).
  void attention(bool fused_qkv = false);
  // Multi-head latent attention (ModelConfig::mla): q_a_proj [QLora, H] and q_a_layernorm
  // mirrored, q_b_proj [Heads·(Nope + Rope), QLora] by rows (q_proj [Heads·(Nope + Rope), H]
  // when QLora is 0), kv_a_proj_with_mqa [KvLora + Rope, H] and kv_a_layernorm mirrored (every
  // shard computes the whole latent), kv_b_proj [Heads·(Nope + V), KvLora] by rows, o_proj
  // [H, Heads·V] by columns; biases of q_a/kv_a/o where attention_bias.
  void latent_attention();
  // Gated DeltaNet (ModelConfig::linear_attention; Qwen3.5's linear_attn): in_proj_qkv's q, k, v
  // row ranges, in_proj_z [Vw, H], in_proj_b/a [ValueHeads, H], each by rows (a shard's heads);
  // conv1d.weight [C, 1, K] by its q/k/v channels alike; dt_bias and A_log [ValueHeads] by rows;
  // the gated norm [ValueDim] mirrored; out_proj [H, Vw] by columns.
  void linear_attention();
  // gate/up_proj [Inner, H] by rows, down_proj [H, Inner] by columns, biases where mlp_bias.
  // fused_gate_up: gate and up are row ranges of one gate_up_proj tensor (Phi-3).
  void dense_mlp(bool fused_gate_up = false);
  // The router [Experts, H] mirrored; each expert's gate/up/down held whole by its owner
  // (expert sharding) or sliced as the MLP is (tensor sharding).
  void experts(const ExpertTensorNames& names = {});
  // model.norm and lm_head (model.embed_tokens again when tied), split by rows.
  void final_norm_and_head();

  std::vector<ParamSpec> take() { return std::move(p_); }

 private:
  void add(std::string hf, std::string card, Shape full, Split split, int64_t per_shard, bool bias = false);
  // A linear layer's matrix: stored as the checkpoint's quantization says (ModelConfig::quantization).
  void add_linear(std::string hf, std::string card, Shape full, Split split, int64_t per_shard);
  void stored_as_checkpoint_says(ParamSpec& p) const;
  // A part of a fused tensor: rows [offset, offset + full[0]) of `stored`.
  void add_part(std::string hf, std::string card, Shape full, Shape stored, int64_t offset, int64_t per_shard);
  // The same, split as `split` says (an expert's part: held whole by its owner, or sliced).
  void add_part(std::string hf, std::string card, Shape full, Shape stored, int64_t offset, Split split,
                int64_t per_shard);

  const ModelConfig& c_;
  const Generics& g_;
  std::string hf_, card_;  // the current layer's prefixes
  std::vector<ParamSpec> p_;
};

// A decoder's whole table: the embedding, each layer as `layer` adds it, the final norm and lm_head.
using LayerParameters = void (*)(ParamTable&, const ModelConfig&, int64_t layer);
std::vector<ParamSpec> decoder_parameters(const ModelConfig& config, const Generics& g, LayerParameters layer);

// Llama's layer (norms before attention and the MLP), the one most architectures share, with
// the config's q/k norms and the MLP a mixture of experts on sparse layers (names: `experts`).
void pre_norm_layer(ParamTable& t, const ModelConfig& c, int64_t i, const ExpertTensorNames& experts = {});
// The plain Llama decoder's table (the fallback for a ModelConfig made without parsing).
std::vector<ParamSpec> llama_parameters(const ModelConfig& config, const Generics& g);

}  // namespace linnet
