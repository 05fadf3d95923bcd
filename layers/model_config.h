// The model's hyperparameters as a checkpoint fixes them (checkpoint/hf_config.h reads them
// from a Hugging Face config.json).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace linnet {

struct RopeScaling {
  enum class Type { none, linear, llama3 };
  Type type = Type::none;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

struct ModelConfig {
  std::string model_type = "llama";  // llama or qwen2
  int64_t vocab = 0, hidden = 0, heads = 0, kv_heads = 0, inner = 0, layers = 0;
  int64_t max_position = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q/k/v_proj.bias (attention_bias, or Qwen2's implicit bias)
  bool o_bias = false;    // o_proj.bias (attention_bias)
  bool mlp_bias = false;  // gate/up/down biases
  DType dtype = DType::bf16;
  std::optional<int64_t> bos_token_id;
  // Every end-of-sequence id: config.json's eos_token_id (an id or a list, as Llama 3 Instruct
  // has) and generation_config.json's; generation stops on any of them.
  std::vector<int64_t> eos_token_ids;
  // A sliding attention window some layer applies (refused when smaller than MaxSeq: linnet
  // attends over the whole context; at MaxSeq ≤ window the two are the same).
  std::optional<int64_t> sliding_window;

  int64_t head_dim() const { return hidden / heads; }
};

}  // namespace linnet
