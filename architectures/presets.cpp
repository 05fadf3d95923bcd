#include "architectures/presets.h"

#include <map>
#include <nlohmann/json.hpp>

#include "architectures/hf_config.h"
#include "core/error.h"

namespace linnet {

namespace {

// Only the keys the model reads; values as published with each checkpoint.
const std::map<std::string, const char*>& presets() {
  static const std::map<std::string, const char*> table = {
      // 8 heads over 4 KV heads (Shards 1, 2, 4), vocab 1000 (padded at Shards 3).
      {"tiny", R"({"vocab_size": 1000, "hidden_size": 128, "num_attention_heads": 8, "num_key_value_heads": 4,
                   "intermediate_size": 384, "num_hidden_layers": 2, "max_position_embeddings": 256,
                   "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "float32",
                   "bos_token_id": 1, "eos_token_id": 2})"},
      {"llama-2-7b", R"({"vocab_size": 32000, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32,
                         "intermediate_size": 11008, "num_hidden_layers": 32, "max_position_embeddings": 4096,
                         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "float16",
                         "bos_token_id": 1, "eos_token_id": 2})"},
      {"llama-3-8b", R"({"vocab_size": 128256, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                         "intermediate_size": 14336, "num_hidden_layers": 32, "max_position_embeddings": 8192,
                         "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
                         "bos_token_id": 128000, "eos_token_id": 128001})"},
      {"llama-3.1-8b", R"({"vocab_size": 128256, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                           "intermediate_size": 14336, "num_hidden_layers": 32, "max_position_embeddings": 131072,
                           "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
                           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                           "bos_token_id": 128000, "eos_token_id": 128001})"},
      {"llama-3.1-70b", R"({"vocab_size": 128256, "hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 8,
                            "intermediate_size": 28672, "num_hidden_layers": 80, "max_position_embeddings": 131072,
                            "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
                            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                            "bos_token_id": 128000, "eos_token_id": 128001})"},
      {"llama-3.2-1b", R"({"vocab_size": 128256, "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8,
                           "intermediate_size": 8192, "num_hidden_layers": 16, "max_position_embeddings": 131072,
                           "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
                           "tie_word_embeddings": true,
                           "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                           "bos_token_id": 128000, "eos_token_id": 128001})"},
      {"qwen2-0.5b", R"({"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "num_attention_heads": 14,
                         "num_key_value_heads": 2, "intermediate_size": 4864, "num_hidden_layers": 24,
                         "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                         "tie_word_embeddings": true, "torch_dtype": "bfloat16",
                         "bos_token_id": 151643, "eos_token_id": 151643})"},
      // Mixtures of experts (issue 30).
      {"mixtral-8x7b", R"({"model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096, "num_attention_heads": 32,
                           "num_key_value_heads": 8, "intermediate_size": 14336, "num_hidden_layers": 32,
                           "num_local_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 32768,
                           "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "torch_dtype": "bfloat16",
                           "bos_token_id": 1, "eos_token_id": 2})"},
      {"qwen3-30b-a3b", R"({"model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048, "num_attention_heads": 32,
                            "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
                            "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                            "norm_topk_prob": true, "num_hidden_layers": 48, "max_position_embeddings": 40960,
                            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "torch_dtype": "bfloat16",
                            "bos_token_id": 151643, "eos_token_id": 151645})"},
      {"olmoe-1b-7b", R"({"model_type": "olmoe", "vocab_size": 50304, "hidden_size": 2048, "num_attention_heads": 16,
                          "num_key_value_heads": 16, "intermediate_size": 1024, "num_experts": 64,
                          "num_experts_per_tok": 8, "norm_topk_prob": false, "num_hidden_layers": 16,
                          "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                          "torch_dtype": "float32", "eos_token_id": 50279})"},
      {"tinyllama-1.1b", R"({"vocab_size": 32000, "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4,
                             "intermediate_size": 5632, "num_hidden_layers": 22, "max_position_embeddings": 2048,
                             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "bfloat16",
                             "bos_token_id": 1, "eos_token_id": 2})"},
  };
  return table;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, json] : presets()) names.push_back(name);
  return names;
}

ModelConfig preset_config(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::string all;
    for (const auto& n : preset_names()) all += (all.empty() ? "" : ", ") + n;
    throw Error(str("unknown preset '", name, "' (presets: ", all, ")"));
  }
  return parse_hf_config(nlohmann::json::parse(it->second), "preset " + name);
}

ModelConfig preset_or_config(const std::string& name_or_path) {
  return presets().count(name_or_path) ? preset_config(name_or_path) : load_hf_config(name_or_path);
}

}  // namespace linnet
