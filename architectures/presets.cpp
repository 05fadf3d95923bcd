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
      // Meta-Llama-3.1-405B's config.json (a plan for pipeline stages across nodes: docs/cluster.md).
      {"llama-3.1-405b", R"({"vocab_size": 128256, "hidden_size": 16384, "num_attention_heads": 128, "num_key_value_heads": 8,
                             "intermediate_size": 53248, "num_hidden_layers": 126, "max_position_embeddings": 131072,
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
      // DeepSeek's experts and latent attention (issue 38): the published configs' keys the
      // model reads (deepseek-ai/DeepSeek-V3 and R1; moonshotai/Kimi-K2-Instruct, whose
      // model_type kimi_k2 is deepseek_v3's; deepseek-ai/DeepSeek-V2; zai-org/GLM-4.5 and
      // GLM-4.5-Air). DeepSeek-V3 and Kimi K2 ship FP8 with 128×128 blocks.
      {"deepseek-v3", R"({"model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168,
                          "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
                          "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256,
                          "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
                          "routed_scaling_factor": 2.5, "norm_topk_prob": true, "first_k_dense_replace": 3,
                          "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                          "v_head_dim": 128, "num_nextn_predict_layers": 1, "max_position_embeddings": 163840,
                          "rms_norm_eps": 1e-6, "rope_theta": 10000,
                          "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                                           "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                                           "type": "yarn"},
                          "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                                  "weight_block_size": [128, 128]},
                          "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1})"},
      {"kimi-k2", R"({"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 163840,
                      "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
                      "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
                      "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 1,
                      "topk_group": 1, "routed_scaling_factor": 2.827, "norm_topk_prob": true,
                      "first_k_dense_replace": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                      "qk_rope_head_dim": 64, "v_head_dim": 128, "num_nextn_predict_layers": 0,
                      "max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "rope_theta": 50000.0,
                      "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0,
                                       "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
                      "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                              "weight_block_size": [128, 128]},
                      "torch_dtype": "bfloat16", "bos_token_id": 163584, "eos_token_id": 163585})"},
      {"deepseek-v2", R"({"model_type": "deepseek_v2", "vocab_size": 102400, "hidden_size": 5120,
                          "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_hidden_layers": 60,
                          "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 160,
                          "n_shared_experts": 2, "num_experts_per_tok": 6, "topk_method": "group_limited_greedy",
                          "n_group": 8, "topk_group": 3, "routed_scaling_factor": 16.0, "norm_topk_prob": false,
                          "first_k_dense_replace": 1, "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
                          "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
                          "max_position_embeddings": 163840, "rms_norm_eps": 1e-6, "rope_theta": 10000,
                          "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                                           "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                                           "type": "yarn"},
                          "torch_dtype": "bfloat16", "bos_token_id": 100000, "eos_token_id": 100001})"},
      {"deepseek-v2-lite", R"({"model_type": "deepseek_v2", "vocab_size": 102400, "hidden_size": 2048,
                               "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
                               "num_attention_heads": 16, "num_key_value_heads": 16, "n_routed_experts": 64,
                               "n_shared_experts": 2, "num_experts_per_tok": 6, "topk_method": "greedy",
                               "routed_scaling_factor": 1.0, "norm_topk_prob": false, "first_k_dense_replace": 1,
                               "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                               "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 163840,
                               "rms_norm_eps": 1e-6, "rope_theta": 10000,
                               "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                                                "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                                                "type": "yarn"},
                               "torch_dtype": "bfloat16", "bos_token_id": 100000, "eos_token_id": 100001})"},
      {"glm-4.5", R"({"model_type": "glm4_moe", "vocab_size": 151552, "hidden_size": 5120, "intermediate_size": 12288,
                      "moe_intermediate_size": 1536, "num_hidden_layers": 92, "num_attention_heads": 96,
                      "num_key_value_heads": 8, "head_dim": 128, "n_routed_experts": 160, "n_shared_experts": 1,
                      "num_experts_per_tok": 8, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.5,
                      "norm_topk_prob": true, "first_k_dense_replace": 3, "num_nextn_predict_layers": 1,
                      "use_qk_norm": true, "attention_bias": true, "partial_rotary_factor": 0.5,
                      "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 1000000,
                      "torch_dtype": "bfloat16", "eos_token_id": [151329, 151336, 151338]})"},
      {"glm-4.5-air", R"({"model_type": "glm4_moe", "vocab_size": 151552, "hidden_size": 4096,
                          "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 46,
                          "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128, "n_routed_experts": 128,
                          "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 1, "topk_group": 1,
                          "routed_scaling_factor": 1.0, "norm_topk_prob": true, "first_k_dense_replace": 1,
                          "num_nextn_predict_layers": 1, "use_qk_norm": false, "attention_bias": true,
                          "partial_rotary_factor": 0.5, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
                          "rope_theta": 1000000, "torch_dtype": "bfloat16", "eos_token_id": [151329, 151336, 151338]})"},
      // Mistral Small 4 (mistralai/Mistral-Small-4-119B-2603) as it ships: Mistral 3's multimodal
      // wrapper around a mistral4 text model, whose sizes are Mistral4Config's defaults (transformers
      // documents them as that checkpoint's); the vision tower is not run.
      {"mistral-4", R"({"model_type": "mistral3", "architectures": ["Mistral3ForConditionalGeneration"],
                        "tie_word_embeddings": false, "torch_dtype": "bfloat16",
                        "text_config": {"model_type": "mistral4", "vocab_size": 131072, "hidden_size": 4096,
                          "intermediate_size": 12288, "moe_intermediate_size": 2048, "num_hidden_layers": 36,
                          "num_attention_heads": 32, "num_key_value_heads": 32, "n_routed_experts": 128,
                          "n_shared_experts": 1, "num_experts_per_tok": 4, "n_group": 1, "topk_group": 1,
                          "routed_scaling_factor": 1.0, "norm_topk_prob": true, "first_k_dense_replace": 0,
                          "q_lora_rank": 1024, "kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 64,
                          "v_head_dim": 128, "rope_interleave": true, "max_position_embeddings": 1048576,
                          "rms_norm_eps": 1e-6,
                          "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 128.0,
                                              "original_max_position_embeddings": 8192, "beta_fast": 32.0,
                                              "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                              "llama_4_scaling_beta": 0.1, "partial_rotary_factor": 0.5},
                          "bos_token_id": 1, "eos_token_id": 2}})"},
      // gpt-oss (issue 39): openai/gpt-oss-20b and gpt-oss-120b's config.json as published, their
      // experts in MXFP4 as they ship (everything else bf16).
      {"gpt-oss-20b", R"({"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "vocab_size": 201088,
                          "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 24,
                          "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
                          "num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 4,
                          "attention_bias": true, "sliding_window": 128, "max_position_embeddings": 131072,
                          "rms_norm_eps": 1e-5, "rope_theta": 150000, "swiglu_limit": 7.0,
                          "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                           "original_max_position_embeddings": 4096, "rope_type": "yarn",
                                           "truncate": false},
                          "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                          "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert":
                            ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
                          "tie_word_embeddings": false, "torch_dtype": "bfloat16", "eos_token_id": 200002,
                          "pad_token_id": 199999})"},
      {"gpt-oss-120b", R"({"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "vocab_size": 201088,
                          "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
                          "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
                          "num_local_experts": 128, "num_experts_per_tok": 4, "experts_per_token": 4,
                          "attention_bias": true, "sliding_window": 128, "max_position_embeddings": 131072,
                          "rms_norm_eps": 1e-5, "rope_theta": 150000, "swiglu_limit": 7.0,
                          "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                           "original_max_position_embeddings": 4096, "rope_type": "yarn",
                                           "truncate": false},
                          "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                          "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert":
                            ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
                          "tie_word_embeddings": false, "torch_dtype": "bfloat16", "eos_token_id": 200002,
                          "pad_token_id": 199999})"},
      // Hybrids with Gated DeltaNet layers (issue 40), their text models. The sizes are transformers
      // 5.24's config classes' defaults, which its sources give as those checkpoints' shapes:
      // Qwen3_5TextConfig ("the Qwen3.5-9B style configuration"), Qwen3_5MoeTextConfig
      // (Qwen/Qwen3.5-35B-A3B), Qwen3NextConfig (Qwen/Qwen3-Next-80B-A3B); not read from the
      // published config.json files (not reachable here), so the token ids and context lengths
      // are the classes' too.
      {"qwen3.5-9b", R"({"model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 4096,
                         "intermediate_size": 12288, "num_hidden_layers": 32, "num_attention_heads": 16,
                         "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 32768,
                         "rms_norm_eps": 1e-6, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
                         "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
                         "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
                         "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
      {"qwen3.5-35b-a3b", R"({"model_type": "qwen3_5_moe_text", "vocab_size": 248320, "hidden_size": 2048,
                              "num_hidden_layers": 40, "num_attention_heads": 16, "num_key_value_heads": 2,
                              "head_dim": 256, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
                              "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
                              "linear_num_key_heads": 16, "linear_num_value_heads": 32, "num_experts": 256,
                              "num_experts_per_tok": 8, "moe_intermediate_size": 512,
                              "shared_expert_intermediate_size": 512,
                              "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
                              "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
      {"qwen3-next-80b-a3b", R"({"model_type": "qwen3_next", "vocab_size": 151936, "hidden_size": 2048,
                                 "intermediate_size": 5632, "num_hidden_layers": 48, "num_attention_heads": 16,
                                 "num_key_value_heads": 2, "head_dim": 256, "max_position_embeddings": 32768,
                                 "rms_norm_eps": 1e-6, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
                                 "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
                                 "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
                                 "shared_expert_intermediate_size": 512, "norm_topk_prob": true,
                                 "decoder_sparse_step": 1, "mlp_only_layers": [],
                                 "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
                                 "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
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
