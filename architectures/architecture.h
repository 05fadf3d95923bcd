// One architecture (a transformers model_type) as linnet runs it: its config class's defaults,
// which of the shared keys it reads, and the hooks where its parsing and its config writer
// differ from the plain Llama decoder. Each lives in its own file under architectures/ (close
// relatives share one: Mistral beside Llama); architectures/registry.cpp lists them.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "architectures/config_reader.h"
#include "layers/card_blocks.h"
#include "layers/model_definition.h"
#include "layers/parameter_table.h"

namespace linnet {

// What parse_layers hands an architecture's layer rule: layer_types as given (empty: absent),
// the window (`sliding_window`, or the config class's default) and each layer's sliding flag
// to set. A rule may also set c.layer_kinds' rope and c.unapplied_window.
struct LayerParse {
  std::vector<std::string> types;
  std::optional<int64_t> window;
  std::vector<bool> sliding;
};

struct Architecture {
  const char* model_type;
  const char* class_name;  // the causal-LM class: config.json's `architectures` entry

  // The config class's defaults, where linnet reads the key.
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  std::optional<int64_t> sliding_window = std::nullopt;
  double rope_theta = 10000.0;

  // Which of the shared keys transformers reads for it (the others are refused when they
  // would change the math).
  bool gelu_tanh = false;            // hidden_activation gelu_pytorch_tanh (Gemma), else silu
  bool local_rope = false;           // a second RoPE for sliding layers (Gemma 3): rope_parameters per layer type
  bool local_base_freq_key = false;  // its base as rope_local_base_freq (Gemma 3)
  double local_rope_theta = 10000.0; // its base when neither names one
  bool partial_rotary = false;       // partial_rotary_factor (Phi-3, GLM-4.5)
  double partial_rotary_default = 1.0;  // when none is given (GLM-4.5: 0.5)
  bool qk_norm_key = false;          // reads use_qk_norm (GLM-4.5: per-head q/k norms when true)
  bool phi3_rope = false;            // "su"/"yarn" read as longrope; top-level original_max_position_embeddings
  bool soft_caps = false;            // logit soft-capping and query_pre_attn_scalar (Gemma)
  bool experts = false;              // mixture-of-experts keys
  bool multipliers = false;          // Granite's scaling multipliers
  bool no_rope_layers = false;       // SmolLM3's NoPE layers
  bool mlp_bias = false;             // reads mlp_bias
  // attention_bias: q/k/v and o biases; qkv_attention_bias: attention_bias gives q/k/v biases only
  // (GLM-4.5's o_proj has none); qkv_always: Qwen2.
  enum class Bias { attention_bias, qkv_attention_bias, qkv_always, none };
  Bias bias = Bias::attention_bias;  // Qwen2: q/k/v biases always; Mistral, Phi-3, Mixtral: none
  bool attention_bias_default = false;  // attention_bias when absent (gpt-oss: true)
  bool linear_attention = false;       // layer_types name linear_attention layers (Qwen3.5, Qwen3-Next)
  bool every_layer_sparse = false;     // no intermediate_size: every layer's MLP is experts (Qwen3.5-MoE)
  bool writes_layer_types = false;     // the writer lists layer_types
  bool writes_use_sliding_window = false;

  // Its attention's own keys, read before the RoPE (multi-head latent attention: the RoPE's
  // width is qk_rope_head_dim).
  void (*attention)(const ConfigReader&, ModelConfig&) = nullptr;
  // Keys of its own it refuses (read among the shared refusals, before the layers).
  void (*refuse)(const ConfigReader&) = nullptr;
  // Each layer's kind and the window (required).
  void (*layers)(const ConfigReader&, ModelConfig&, LayerParse&) = nullptr;
  // The mixture of experts (where `experts`).
  void (*moe)(const ConfigReader&, ModelConfig&) = nullptr;
  // The family's own switches, read last.
  void (*finish)(const ConfigReader&, ModelConfig&) = nullptr;
  // Keys of its own in config.json, written back.
  void (*write)(nlohmann::json&, const ModelConfig&) = nullptr;

  // Its network: its parameter table and its card (layers/model_definition.h), composed of the
  // shared pieces in layers/parameter_table.h and layers/card_blocks.h.
  ModelDefinition definition;
};

// The architectures in the registry's order; the one of a model_type (nullptr: none).
const std::vector<const Architecture*>& architectures();
const Architecture* find_architecture(const std::string& model_type);

// Layer rules more than one architecture uses.
// No sliding window in transformers' code (Llama, Granite, OLMo 2, OLMoE): a window given is
// kept as c.unapplied_window, refused later when it would matter.
void window_not_applied(const ConfigReader& r, ModelConfig& c, LayerParse& l);
// Every layer attends within the window when one is set (Mistral, Phi-3, Mixtral).
void every_layer_slides(const ConfigReader& r, ModelConfig& c, LayerParse& l);

// OLMo 2's layer (OLMo 3's too): norms after attention and the MLP only, q/k norms over the
// whole projection.
void olmo2_layer_parameters(ParamTable& t, const ModelConfig& c, int64_t i);

}  // namespace linnet
