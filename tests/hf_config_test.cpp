// config.json → generics, and the checkpoints users bring that must be refused clearly.
#include <gtest/gtest.h>

#include <filesystem>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/loader.h"
#include "architectures/hf_config.h"
#include "architectures/presets.h"
#include "runtime/write_checkpoint.h"
#include "model_fixtures.h"

using namespace linnet;
using nlohmann::json;
namespace fs = std::filesystem;

using linnet::testing::fresh_dir;

namespace {

json llama() {
  return json::parse(R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 96, "num_hidden_layers": 2, "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "float32", "hidden_act": "silu"})");
}

std::string error_of(const json& j) {
  try {
    parse_hf_config(j, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(HfConfig, ParsesTheSharedConfigs) {
  for (const auto& e : fs::directory_iterator(fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/configs")) {
    if (e.path().extension() != ".json") continue;
    const ModelConfig c = load_hf_config(e.path().string());
    EXPECT_GT(c.layers, 0) << e.path();
    // The presets carry the same shapes.
    const ModelConfig p = preset_config(e.path().stem().string());
    EXPECT_EQ(p.vocab, c.vocab);
    EXPECT_EQ(p.hidden, c.hidden);
    EXPECT_EQ(p.kv_heads, c.kv_heads);
    EXPECT_EQ(p.inner, c.inner);
    EXPECT_EQ(p.tie_word_embeddings, c.tie_word_embeddings);
    EXPECT_EQ(p.rope.type, c.rope.type);
    EXPECT_EQ(p.qkv_bias, c.qkv_bias);
  }
  const ModelConfig q = load_hf_config(std::string(LINNET_SOURCE_DIR) + "/tests/fixtures/configs/qwen2-0.5b.json");
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_FALSE(q.o_bias);
}

TEST(HfConfig, RoundTripsThroughJson) {
  ModelConfig c = parse_hf_config(llama(), "x");
  c.rope.type = RopeScaling::Type::llama3;
  c.rope.factor = 8;
  c.rope.original_max_position = 16;
  c.mlp_bias = true;
  const ModelConfig back = parse_hf_config(to_hf_config(c), "y");
  EXPECT_EQ(back.rope.type, RopeScaling::Type::llama3);
  EXPECT_EQ(back.rope.original_max_position, 16);
  EXPECT_TRUE(back.mlp_bias);
  EXPECT_EQ(back.kv_heads, 2);
}

TEST(HfConfig, RefusesUnsupportedValues) {
  auto with = [](const char* key, json v) {
    json j = llama();
    j[key] = v;
    return j;
  };
  EXPECT_EQ(error_of(with("rope_scaling", {{"rope_type", "mrope"}, {"factor", 4}})),
            "cfg.json: unsupported rope_scaling rope_type 'mrope' (supported: default, linear, llama3, dynamic, yarn, "
            "longrope)");
  EXPECT_EQ(error_of(with("hidden_act", "gelu")), "cfg.json: unsupported hidden_act 'gelu' (supported: silu)");
  EXPECT_EQ(parse_hf_config(with("head_dim", 32), "cfg.json").head_dim(), 32);  // issue 28: read, not refused
  EXPECT_EQ(error_of(with("num_key_value_heads", 3)), "cfg.json: num_attention_heads 4 does not divide by num_key_value_heads 3");
  EXPECT_EQ(error_of(with("vocab_size", -5)), "cfg.json: 'vocab_size' must be a positive integer below 2^31, got -5");
  EXPECT_EQ(error_of(with("torch_dtype", "float8")), "cfg.json: unsupported torch_dtype 'float8' (supported: bfloat16, float16, float32)");
  EXPECT_EQ(error_of(with("model_type", "gpt2")),
            "cfg.json: unsupported model_type 'gpt2' (supported: llama, qwen2, mistral, qwen3, gemma2, gemma3_text, phi3, "
            "olmo2, granite, smollm3, olmo3, mixtral, qwen3_moe, olmoe, glm4_moe, deepseek_v2, deepseek_v3, mistral4, "
            "gpt_oss, qwen3_5_text, qwen3_5_moe_text, qwen3_next)");
  EXPECT_EQ(error_of(with("model_type", "qwen2_moe")),
            "cfg.json: unsupported model_type 'qwen2_moe' (its mixture-of-experts layers are not implemented: linnet's "
            "are mixtral, qwen3_moe, olmoe, glm4_moe, deepseek_v2, deepseek_v3, mistral4, gpt_oss, qwen3_5_moe_text and qwen3_next; supported: llama, qwen2, mistral, qwen3, gemma2, "
            "gemma3_text, phi3, "
            "olmo2, granite, smollm3, olmo3, mixtral, qwen3_moe, olmoe, glm4_moe, deepseek_v2, deepseek_v3, mistral4, gpt_oss, qwen3_5_text, qwen3_5_moe_text, qwen3_next)");
  json missing = llama();
  missing.erase("hidden_size");
  EXPECT_EQ(error_of(missing), "cfg.json: missing required key 'hidden_size'");
  EXPECT_EQ(error_of(with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 1},
                                           {"high_freq_factor", 4}})),
            "cfg.json: missing required key 'original_max_position_embeddings'");
  EXPECT_THROW(load_hf_config("/nonexistent/config.json"), Error);
}

TEST(HfConfig, GenericsDivisibilityIsARule) {
  const ModelConfig c = parse_hf_config(llama(), "x");
  try {
    bind_generics(c, RunOptions{1, 0, 3, 64, std::nullopt});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "Heads=4 does not divide by Shards=3");
  }
  EXPECT_THROW(bind_generics(c, RunOptions{1, 60, 1, 64, std::nullopt}), Error);  // MaxSeq % PageSize
  const Generics g = bind_generics(c, RunOptions{2, 0, 2, 16, std::nullopt});
  EXPECT_EQ(g.max_seq, 64);
  EXPECT_EQ(g.vocab_per_shard(), 50);
}

TEST(HfConfig, TensorDtypeMustMatchTorchDtype) {
  const fs::path d = fresh_dir("dtype");
  ModelConfig c = parse_hf_config(llama(), "x");
  write_random_checkpoint(c, d.string(), DType::bf16, 1);
  // config.json now says bfloat16; claim float32 instead.
  json j = json::parse(std::ifstream(d / "config.json"));
  j["torch_dtype"] = "float32";
  std::ofstream(d / "config.json") << j.dump();
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  try {
    load_model(d.string(), RunOptions{}, *be, comm);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors: tensor 'model.embed_tokens.weight' is stored as bf16, "
                                         "but config.json's torch_dtype says f32"),
              std::string::npos)
        << e.what();
  }
}

TEST(HfConfig, MissingAndMisshapedTensorsNameFileAndTensor) {
  const fs::path d = fresh_dir("shape");
  ModelConfig c = parse_hf_config(llama(), "x");
  c.inner = 128;
  write_random_checkpoint(c, d.string(), DType::f32, 1);
  c.inner = 96;  // the config now disagrees with the weights
  std::ofstream(d / "config.json") << to_hf_config(c).dump();
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  try {
    load_model(d.string(), RunOptions{}, *be, comm);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 64], expected [96, 64]"),
              std::string::npos)
        << e.what();
  }
  c.o_bias = c.qkv_bias = true;  // biases the file does not have
  c.inner = 128;
  std::ofstream(d / "config.json") << to_hf_config(c).dump();
  try {
    load_model(d.string(), RunOptions{}, *be, comm);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor 'model.layers.0.self_attn.q_proj.bias'"), std::string::npos) << e.what();
  }
}

// issue 34 item 11: num_hidden_layers 100000 over 2-layer files was refused only after 40 s (the
// memory plan and every layer's reads first). Now from the headers, at once, naming both.
TEST(HfConfig, MoreLayersThanTheFilesHoldAreRefusedBeforeAnyRead) {
  const fs::path d = fresh_dir("layers");
  ModelConfig c = parse_hf_config(llama(), "x");
  write_random_checkpoint(c, d.string(), DType::f32, 1);
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  for (int64_t layers : {3, 100000}) {
    c.layers = layers;
    std::ofstream(d / "config.json") << to_hf_config(c).dump();
    const auto start = std::chrono::steady_clock::now();
    try {
      load_model(d.string(), RunOptions{}, *be, comm);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), str(d.string(), ": config.json's num_hidden_layers is ", layers,
                                           ", but the checkpoint's files hold layers 0…1 only (model.layers.2.* is "
                                           "missing)"));
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  }
}
