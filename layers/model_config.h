// The model's hyperparameters as a checkpoint fixes them (architectures/hf_config.h reads them
// from a Hugging Face config.json). One struct for every family linnet runs: a family is a
// Llama-shaped decoder plus the few switches below, each exact against transformers.
#pragma once
#include "layers/block_options.h"
#include "layers/quantization.h"
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/expert_choice.h"

namespace linnet {

struct ModelDefinition;  // layers/model_definition.h

// One RoPE's frequencies (transformers' rope_type and its parameters).
struct RopeScaling {
  enum class Type { none, linear, llama3, dynamic, yarn, longrope };
  Type type = Type::none;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
  // yarn: the attention factor (transformers' default from factor, mscale, mscale_all_dim when
  // not given), the ramp's bounds and whether they are truncated to whole dims.
  std::optional<double> attention_factor;  // also longrope's
  double beta_fast = 32, beta_slow = 1;
  std::optional<double> mscale, mscale_all_dim;
  bool truncate = true;
  // longrope: per-frequency divisors for sequences up to / past original_max_position.
  std::vector<double> short_factor, long_factor;
};

// A RoPE: base and scaling. Layers of one model may use two (Gemma 3: its sliding layers' own).
struct Rope {
  double theta = 10000.0;
  RopeScaling scaling;
};

// What one decoder layer does differently from the next (transformers' layer_types and
// SmolLM3's no_rope_layers).
struct LayerKind {
  bool sliding = false;  // attends within ModelConfig::sliding_window
  int rope = 0;          // 0: the model's RoPE, 1: local_rope (Gemma 3's sliding layers), -1: none (NoPE)
  bool sparse = false;   // a mixture of experts in place of the MLP (ModelConfig::experts)
  // Gated DeltaNet linear attention in place of attention (ModelConfig::linear_attention):
  // transformers' layer_types "linear_attention" (Qwen3.5, Qwen3-Next).
  bool linear = false;
};

// Gated DeltaNet (Qwen3.5, Qwen3-Next): key_heads heads of key_dim for q and k, value_heads of
// value_dim for v (value head h reads key head h / (value_heads / key_heads)), a causal depthwise
// convolution of conv_kernel taps over [q | k | v] (layers/gated_delta_net.h).
struct LinearAttentionConfig {
  int64_t key_heads = 0, key_dim = 0, value_heads = 0, value_dim = 0;
  int64_t conv_kernel = 4;
  // Qwen3-Next: q, k, v and z in one in_proj_qkvz and b, a in one in_proj_ba, grouped per key head
  // ([q_h | k_h | v_group | z_group], [b_group | a_group]); Qwen3.5: in_proj_qkv, in_proj_z, _b, _a.
  bool grouped_projections = false;
  int64_t key_width() const { return key_heads * key_dim; }
  int64_t value_width() const { return value_heads * value_dim; }
  int64_t conv_channels() const { return 2 * key_width() + value_width(); }  // [q | k | v]
};

// Multi-head latent attention (DeepSeek V2/V3, Kimi K2, Mistral 4): q through a low-rank
// q_a_proj → norm → q_b_proj (or one q_proj when q_lora is 0), keys and values from one latent
// c_kv of kv_lora values per token (kv_a_proj_with_mqa → [c_kv | k_pe] → norm; kv_b_proj →
// [k_nope | v] per head) and a rotary key k_pe of `rope` values shared by the heads. A query
// head is [q_nope (nope) | q_pe (rope)], a value head v wide (layers/latent_attention.h).
struct LatentAttentionConfig {
  int64_t q_lora = 0;   // q_lora_rank (0: null, one q_proj)
  int64_t kv_lora = 0;  // kv_lora_rank
  int64_t nope = 0;     // qk_nope_head_dim
  int64_t rope = 0;     // qk_rope_head_dim
  int64_t v = 0;        // v_head_dim
  // rope_interleave (DeepSeek V3's default; V2's complex rotation): the rotary columns are
  // pairs (0, 1), (2, 3), … rather than halves.
  bool interleaved = false;
  // Mistral 4's llama_4_scaling_beta: queries × (1 + beta·ln(1 + ⌊position / period⌋)), period
  // its RoPE's original_max_position_embeddings (Backend::scale_by_position; 0: none).
  float query_scale_beta = 0;
  int64_t query_scale_period = 0;
  int64_t qk_head() const { return nope + rope; }
  // The head the attention ops see (absorbed form): [k_pe | c_kv].
  int64_t latent_head() const { return rope + kv_lora; }
};

struct ModelConfig {
  // The family, by transformers' model_type (architectures/registry.cpp lists them).
  std::string model_type = "llama";
  // A multimodal checkpoint whose text model this is ("mistral3": config.json's text_config,
  // the tensors under language_model.*; the vision tower's set aside), "" for a text model.
  std::string multimodal;
  int64_t vocab = 0, hidden = 0, heads = 0, kv_heads = 0, inner = 0, layers = 0;
  int64_t head_size = 0;  // head_dim when it is not hidden / heads (0: hidden / heads)
  int64_t max_position = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope;
  std::optional<Rope> local_rope;       // Gemma 3: rope_local_base_freq for sliding layers
  double partial_rotary_factor = 1.0;   // rotated fraction of each head (Phi-4-mini: 0.75)
  std::vector<LayerKind> layer_kinds;   // one per layer (empty: every layer full, with RoPE)
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q/k/v_proj.bias (attention_bias, or Qwen2's implicit bias)
  bool o_bias = false;    // o_proj.bias (attention_bias)
  bool mlp_bias = false;  // gate/up/down biases
  DType dtype = DType::bf16;
  std::optional<int64_t> bos_token_id;
  // Every end-of-sequence id: config.json's eos_token_id (an id or a list, as Llama 3 Instruct
  // has) and generation_config.json's; generation stops on any of them.
  std::vector<int64_t> eos_token_ids;
  // The window of the layers whose layer_kinds say sliding (none slide without one).
  std::optional<int64_t> sliding_window;
  // A window transformers does not apply for this model_type (Llama's config may carry one):
  // refused when smaller than MaxSeq, as nobody can say which of the two the model wants.
  std::optional<int64_t> unapplied_window;

  // ---- the families' switches (Llama: all neutral) ----
  using QkNorm = linnet::QkNorm;  // layers/block_options.h
  QkNorm qk_norm = QkNorm::none;  // Qwen 3, Gemma 3: per head; OLMo 2: over the whole projection
  bool norm_plus_one = false;     // Gemma: RMSNorm scales by (1 + w)
  bool pre_norms = true;          // a norm before attention and MLP (OLMo 2: none)
  bool post_norms = false;        // a norm after attention and MLP (Gemma 2/3, OLMo 2)
  using Activation = MlpActivation;  // layers/block_options.h
  Activation activation = Activation::silu;  // Gemma: GeGLU with the tanh GELU
  double embedding_scale = 1.0;       // Gemma: √hidden (in f32); Granite: embedding_multiplier
  double residual_multiplier = 1.0;   // Granite: x + f(x)·m
  std::optional<double> attention_scale;  // scores' scale (default 1/√head_dim); Gemma, Granite
  double attn_softcap = 0;   // Gemma 2's attn_logit_softcapping (0: none)
  double final_softcap = 0;  // Gemma 2's final_logit_softcapping (0: none)
  double logits_scaling = 1.0;  // Granite: logits / logits_scaling
  bool fused_qkv = false;       // Phi-3: one qkv_proj tensor in the checkpoint
  bool fused_gate_up = false;   // Phi-3: one gate_up_proj tensor
  // Phi-3 with longrope (0: never): when a sequence's token at this position is next to
  // decode, with every earlier one cached, its whole K/V is recomputed first, as transformers'
  // generate does (its keys then carry the long factors, as a full forward's would).
  int64_t recompute_cache_at = 0;

  // ---- mixtures of experts (Mixtral, Qwen3-MoE, OLMoE): the layers whose LayerKind says
  // sparse replace the MLP by a router and `experts` SwiGLU experts, `experts_per_token` of
  // them per token (transformers' *SparseMoeBlock) ----
  int64_t experts = 0;            // num_local_experts / num_experts (0: no sparse layer)
  int64_t experts_per_token = 0;  // num_experts_per_tok: TopK
  int64_t expert_inner = 0;       // each expert's intermediate size (Qwen3-MoE: moe_intermediate_size)
  bool norm_topk_prob = false;    // the TopK weights divided by their sum (Mixtral: always)
  // Where the experts' tensors are: Mixtral's block_sparse_moe.experts.E.w1/w3/w2, or
  // mlp.experts.E.gate_proj/up_proj/down_proj (Qwen3-MoE, OLMoE); the router is `gate` in both.
  // gpt_oss: mlp.experts.gate_up_proj [E, H, 2·ExpertInner] (each expert's matrix transposed,
  // gate and up interleaved by column) and down_proj [E, ExpertInner, H], each with a bias
  // (gate_up_proj_bias, down_proj_bias); the router mlp.router with a bias.
  enum class ExpertNames { mixtral, qwen, gpt_oss };
  ExpertNames expert_names = ExpertNames::qwen;
  // gpt-oss's experts: the clamped SwiGLU (swiglu_alpha, swiglu_limit: Backend::swiglu_clamped)
  // over their interleaved gate/up, biases on both products, the router's logits (with its
  // bias) rounded to T before the top-k and the softmax over the chosen, as transformers
  // computes them in the model's dtype.
  std::optional<ClampedSwiglu> clamped_swiglu;
  // DeepSeek's experts (GLM-4.5; DeepSeek V2/V3 and Mistral 4 with issue 38's attention): the
  // router in f32 on the input widened to f32 (its weight kept in f32, as transformers keeps
  // it), the experts chosen by `expert_choice` (core/expert_choice.h; none: softmax and top-k),
  // e_score_correction_bias beside the router where `router_bias`, and shared experts — one
  // SwiGLU of shared_expert_inner (moe_intermediate_size × n_shared_experts; 0: none) — added
  // to the routed sum.
  std::optional<ExpertChoice> expert_choice;
  bool router_bias = false;
  // Mistral 4's router: its weight in T (not kept in f32), x·Wᵀ and the softmax rounded to T
  // as transformers computes them in the model's dtype, the choice among those probabilities.
  bool router_in_model_dtype = false;
  int64_t shared_expert_inner = 0;
  // Multi-token-prediction layers the checkpoint holds after the last (model.layers.<layers + i>.*,
  // num_nextn_predict_layers): skipped at load, with one log line.
  int64_t mtp_layers = 0;

  // Attention sinks (gpt-oss): self_attn.sinks, one logit per head in every softmax's denominator.
  bool attention_sinks = false;

  // Multi-head latent attention in place of grouped-query attention (DeepSeek V2/V3, Mistral 4).
  std::optional<LatentAttentionConfig> mla;

  // Gated DeltaNet layers (LayerKind::linear) beside the full-attention ones (Qwen3.5, Qwen3-Next).
  std::optional<LinearAttentionConfig> linear_attention;
  // The full-attention layers' output gate (Qwen3.5, Qwen3-Next): q_proj holds per head [q | gate]
  // (2·D rows), and the attention's output is multiplied by sigmoid(gate) before o_proj.
  bool attention_output_gate = false;
  // Qwen3-Next's / Qwen3.5-MoE's shared expert: sigmoid(shared_expert_gate(x)) scales its output.
  bool shared_expert_gate = false;

  // A quantized checkpoint's layout (quantization_config; none: every matrix dense).
  std::optional<Quantization> quantization;

  // Its architecture's parameter table and card (set by the config's parsing; nullptr: Llama's).
  const ModelDefinition* definition = nullptr;

  int64_t head_dim() const { return head_size > 0 ? head_size : hidden / heads; }
  // Columns of each head that RoPE rotates (even; head_dim × partial_rotary_factor).
  // (Latent attention: the rotary key's width, qk_rope_head_dim.)
  int64_t rotary_dim() const {
    if (mla) return mla->rope;
    return static_cast<int64_t>(static_cast<double>(head_dim()) * partial_rotary_factor);
  }
  LayerKind layer_kind(int64_t i) const {
    return i < static_cast<int64_t>(layer_kinds.size()) ? layer_kinds[static_cast<size_t>(i)] : LayerKind{};
  }
  // Layer i's attention block options and the MLP's (layers/block_options.h): what the blocks
  // are told of the family, one rule each.
  AttentionOptions attention_options(int64_t i) const {
    AttentionOptions o;
    o.qk_norm = qk_norm;
    if (layer_kind(i).sliding && sliding_window) o.window = sliding_window;
    o.scale = attention_scale ? static_cast<float>(*attention_scale) : 0.0f;
    o.softcap = static_cast<float>(attn_softcap);
    o.sinks = attention_sinks;
    return o;
  }
  MlpOptions mlp_options() const { return MlpOptions{activation}; }
  bool moe() const { return experts > 0; }
  bool sparse_layer(int64_t i) const { return moe() && layer_kind(i).sparse; }
  bool linear_layer(int64_t i) const { return linear_attention && layer_kind(i).linear; }
  bool any_linear() const {
    for (int64_t i = 0; i < layers; ++i)
      if (linear_layer(i)) return true;
    return false;
  }
  // Whether some layer keeps a dense MLP of Inner (every layer of a dense model; Qwen3-MoE's
  // mlp_only_layers and those decoder_sparse_step skips).
  bool any_dense_mlp() const {
    for (int64_t i = 0; i < layers; ++i)
      if (!sparse_layer(i)) return true;
    return false;
  }
  bool any_sliding() const {
    for (const auto& k : layer_kinds)
      if (k.sliding) return true;
    return false;
  }
  // Every layer full attention with the model's RoPE.
  bool uniform_layers() const {
    for (const auto& k : layer_kinds)
      if (k.sliding || k.rope != 0 || k.linear) return false;
    return true;
  }
  // Whether this is the plain Llama decoder (the seed's card applies as it is).
  bool llama_shaped() const {
    return qk_norm == QkNorm::none && !norm_plus_one && pre_norms && !post_norms && activation == Activation::silu &&
           embedding_scale == 1.0 && residual_multiplier == 1.0 && !attention_scale && attn_softcap == 0 &&
           final_softcap == 0 && logits_scaling == 1.0 && head_size == 0 && uniform_layers() && !mla &&
           partial_rotary_factor == 1.0 && !local_rope && !moe() && !linear_attention && !attention_output_gate;
  }
};

}  // namespace linnet
