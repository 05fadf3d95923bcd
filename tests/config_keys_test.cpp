// config.json as transformers 5 writes it (rope_parameters, dtype, eos lists,
// generation_config.json) and every key that changes the math linnet does not implement
// (docs/config.md): read both spellings, refuse what would run silently wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "architectures/hf_config.h"
#include "layers/generics.h"
#include "core/error.h"

using namespace linnet;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json llama() {
  return json::parse(R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 96, "num_hidden_layers": 2, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5, "torch_dtype": "float32", "hidden_act": "silu"})");
}

json with(json j, const std::string& key, json v) {
  j[key] = std::move(v);
  return j;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
std::string parse_error(const json& j) { return error_of([&] { parse_hf_config(j, "cfg.json"); }); }

const json kLlama3Rope = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                          {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};

}  // namespace

// transformers 5's save_pretrained: no top-level rope_theta / rope_scaling.
TEST(ConfigKeys, ReadsTransformers5RopeParameters) {
  const ModelConfig c = parse_hf_config(with(llama(), "rope_parameters", kLlama3Rope), "cfg.json");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope.type, RopeScaling::Type::llama3);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.original_max_position, 8192);
  const ModelConfig d = parse_hf_config(
      with(llama(), "rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e6}}), "cfg.json");
  EXPECT_EQ(d.rope_theta, 1e6);
  EXPECT_EQ(d.rope.type, RopeScaling::Type::none);
  const ModelConfig l = parse_hf_config(
      with(llama(), "rope_parameters", {{"rope_type", "linear"}, {"rope_theta", 1e4}, {"factor", 4.0}}), "cfg.json");
  EXPECT_EQ(l.rope.type, RopeScaling::Type::linear);
  EXPECT_EQ(l.rope.factor, 4.0);
  // The per-layer-type form, as transformers writes it for models with several layer types:
  // transformers 5.24 does not read it so for a Llama (it runs default RoPE: 0.79 relative
  // error against linnet's llama3 RoPE before), so it is refused naming the key.
  EXPECT_EQ(parse_error(with(llama(), "rope_parameters", {{"full_attention", kLlama3Rope}})),
            "cfg.json: rope_parameters in the per-layer-type form (keys full_attention, …) is not read so by "
            "transformers for model_type 'llama' (it would run default RoPE): give one RoPE object "
            "{\"rope_type\", \"rope_theta\", …}");
}

TEST(ConfigKeys, BothSpellingsMustAgree) {
  json j = with(llama(), "rope_parameters", kLlama3Rope);
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = kLlama3Rope;
  j["rope_scaling"].erase("rope_theta");
  const ModelConfig c = parse_hf_config(j, "cfg.json");  // the same RoPE written twice
  EXPECT_EQ(c.rope.type, RopeScaling::Type::llama3);
  j["rope_theta"] = 10000.0;
  EXPECT_EQ(parse_error(j), "cfg.json: rope_theta 10000 and rope_parameters.rope_theta 500000 disagree");
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  EXPECT_EQ(parse_error(j),
            "cfg.json: rope_scaling (linear (factor 8)) and rope_parameters (llama3 (factor 8, low_freq_factor 1, "
            "high_freq_factor 4, original_max_position_embeddings 8192)) disagree");
}

TEST(ConfigKeys, UnknownRopeTypeRefusedUnderEitherKey) {
  for (const char* type : {"proportional", "mrope", "su"}) {  // "su" is longrope for phi3 only
    json p = {{"rope_type", type}, {"rope_theta", 10000.0}, {"factor", 4.0}};
    const std::string supported = "(supported: default, linear, llama3, dynamic, yarn, longrope)";
    EXPECT_EQ(parse_error(with(llama(), "rope_parameters", p)),
              str("cfg.json: unsupported rope_parameters rope_type '", type, "' ", supported));
    p.erase("rope_theta");
    EXPECT_EQ(parse_error(with(llama(), "rope_scaling", p)),
              str("cfg.json: unsupported rope_scaling rope_type '", type, "' ", supported));
  }
}

// Each key that would change the math, refused with its name (docs/config.md lists them).
TEST(ConfigKeys, RefusesMathItDoesNotImplement) {
  const std::vector<std::pair<std::string, json>> refused = {
      {"attn_logit_softcapping", 50.0},
      {"final_logit_softcapping", 30.0},
      {"partial_rotary_factor", 0.5},
      {"pretraining_tp", 2},
      {"hidden_act", "gelu"},
      {"num_local_experts", 8},
      {"num_experts", 4},
      {"use_qk_norm", true},
      {"no_rope_layers", json::array({1, 0})},
      {"query_pre_attn_scalar", 256},
      {"embedding_multiplier", 12.0},
      {"logits_scaling", 8.0},
      {"quantization_config", {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}}},
      {"architectures", json::array({"LlamaForSequenceClassification"})},
  };
  for (const auto& [key, value] : refused) {
    const std::string e = parse_error(with(llama(), key, value));
    EXPECT_NE(e.find(key), std::string::npos) << key << ": " << e;
    EXPECT_NE(e.find("support"), std::string::npos) << key << ": " << e;
  }
  // partial_rotary_factor inside rope_parameters too.
  json p = kLlama3Rope;
  p["partial_rotary_factor"] = 0.5;
  EXPECT_NE(parse_error(with(llama(), "rope_parameters", p)).find("rope_parameters.partial_rotary_factor 0.5"),
            std::string::npos);
  // The neutral values transformers 5 writes are accepted.
  json neutral = llama();
  for (auto [k, v] : std::vector<std::pair<const char*, json>>{{"pretraining_tp", 1}, {"attention_dropout", 0.0},
                                                                 {"pad_token_id", nullptr}, {"use_cache", true},
                                                                 {"head_dim", 16}, {"hidden_act", "swish"},
                                                                 {"partial_rotary_factor", 1.0}, {"dtype", "float32"}})
    neutral[k] = v;
  EXPECT_EQ(parse_error(neutral), "(no error)");
}

// Windows apply where transformers' code of the model_type applies them; Llama's code has
// none, so a window smaller than MaxSeq in a Llama config is refused, naming both.
TEST(ConfigKeys, SlidingWindowWhereTransformersAppliesIt) {
  auto sliding = [](const ModelConfig& c) {
    std::vector<bool> v;
    for (int64_t i = 0; i < c.layers; ++i) v.push_back(c.layer_kind(i).sliding);
    return v;
  };
  json q = with(llama(), "model_type", "qwen2");
  q["sliding_window"] = 4096;
  q["use_sliding_window"] = false;  // Qwen2's published configs: a window that is not used
  EXPECT_FALSE(parse_hf_config(q, "cfg.json").sliding_window);
  q["use_sliding_window"] = true;
  q["max_window_layers"] = 2;  // layers from 2 on slide: none of the 2
  EXPECT_FALSE(parse_hf_config(q, "cfg.json").sliding_window);
  q["max_window_layers"] = 1;
  const ModelConfig c = parse_hf_config(q, "cfg.json");
  ASSERT_TRUE(c.sliding_window);
  EXPECT_EQ(*c.sliding_window, 4096);
  EXPECT_EQ(sliding(c), (std::vector<bool>{false, true}));
  EXPECT_EQ(bind_generics(c, RunOptions{}).max_seq, 8192);  // implemented: no refusal
  // transformers 5's layer_types.
  json t = with(q, "layer_types", {"sliding_attention", "full_attention"});
  t["sliding_window"] = 1024;
  EXPECT_EQ(sliding(parse_hf_config(t, "cfg.json")), (std::vector<bool>{true, false}));
  t["layer_types"] = {"full_attention", "full_attention"};
  EXPECT_FALSE(parse_hf_config(t, "cfg.json").sliding_window);
  t["layer_types"] = {"full_attention", "chunked_attention"};
  EXPECT_NE(parse_error(t).find("layer_types[1] 'chunked_attention' is not supported"), std::string::npos);
  // Mistral: every layer, and its config class's default 4096 when the key is absent.
  const json m = with(llama(), "model_type", "mistral");
  EXPECT_EQ(*parse_hf_config(m, "cfg.json").sliding_window, 4096);
  EXPECT_EQ(sliding(parse_hf_config(m, "cfg.json")), (std::vector<bool>{true, true}));
  EXPECT_FALSE(parse_hf_config(with(m, "sliding_window", nullptr), "cfg.json").sliding_window);
  // Llama has no sliding window in transformers: a window set is refused below MaxSeq.
  const ModelConfig l = parse_hf_config(with(llama(), "sliding_window", 2048), "cfg.json");
  EXPECT_FALSE(l.sliding_window);
  EXPECT_EQ(error_of([&] { bind_generics(l, RunOptions{}); }),
            "sliding_window=2048 is smaller than MaxSeq=8192: transformers' llama code applies no sliding window, so "
            "the config says one thing and the model another (at MaxSeq ≤ the window the two are the same: pass "
            "--max-seq 2048 or less)");
  EXPECT_EQ(bind_generics(l, RunOptions{1, 2048, 1, 64, std::nullopt}).max_seq, 2048);
}

TEST(ConfigKeys, EveryEndOfSequenceIdIsKept) {
  const fs::path d = fs::temp_directory_path() / "linnet_cfg_eos";
  fs::remove_all(d);
  fs::create_directories(d);
  const json llama3 = with(llama(), "vocab_size", 128256);
  std::ofstream(d / "config.json") << with(llama3, "eos_token_id", {128001, 128008, 128009}).dump();
  EXPECT_EQ(load_hf_config(d.string()).eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  // generation_config.json adds its own (Llama 3 Instruct's config says 128001, its
  // generation config 128001, 128009); duplicates are kept once.
  std::ofstream(d / "config.json") << with(llama3, "eos_token_id", 128001).dump();
  std::ofstream(d / "generation_config.json") << R"({"bos_token_id": 128000, "eos_token_id": [128001, 128009]})";
  const ModelConfig c = load_hf_config(d.string());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128009}));
  EXPECT_EQ(c.bos_token_id, 128000);
  std::ofstream(d / "generation_config.json") << R"({"eos_token_id": "end"})";
  EXPECT_NE(error_of([&] { load_hf_config(d.string()); }).find("generation_config.json: 'eos_token_id' must be a token id"),
            std::string::npos);
  EXPECT_NE(parse_error(with(llama(), "eos_token_id", {1, -2})).find("'eos_token_id' must be a token id"),
            std::string::npos);
  // Ids outside the vocabulary are refused, never wrapped to 32 bits (4294967298 ran as 2).
  EXPECT_NE(parse_error(with(llama(), "eos_token_id", 4294967298LL)).find("'eos_token_id' = 4294967298 is not a token id: vocab_size is 100"),
            std::string::npos);
  EXPECT_NE(parse_error(with(llama(), "bos_token_id", 100)).find("'bos_token_id' = 100 is not a token id"), std::string::npos);
  EXPECT_NE(parse_error(with(llama(), "eos_token_id", json::array({1, 18446744073709551615ULL}))).find("must be a token id"),
            std::string::npos);
  std::ofstream(d / "generation_config.json") << R"({"eos_token_id": [128001, 128256]})";
  EXPECT_NE(error_of([&] { load_hf_config(d.string()); }).find("generation_config.json: 'eos_token_id' = 128256 is not a token id"),
            std::string::npos);
}

// The fixtures saved by transformers 5.24's own save_pretrained (tools/golden) read as
// their classic twins do.
TEST(ConfigKeys, SavedPretrainedFixturesEqualTheirClassicTwins) {
  const fs::path golden = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden";
  int twins = 0;
  for (const auto& e : fs::directory_iterator(golden)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !name.ends_with("_saved")) continue;
    const ModelConfig saved = load_hf_config(e.path().string());
    const ModelConfig classic = load_hf_config((golden / name.substr(0, name.size() - 6)).string());
    SCOPED_TRACE(name);
    EXPECT_EQ(saved.rope_theta, classic.rope_theta);
    EXPECT_EQ(saved.rope.type, classic.rope.type);
    EXPECT_EQ(saved.rope.factor, classic.rope.factor);
    EXPECT_EQ(saved.rope.original_max_position, classic.rope.original_max_position);
    EXPECT_EQ(saved.dtype, classic.dtype);
    EXPECT_EQ(saved.qkv_bias, classic.qkv_bias);
    EXPECT_EQ(saved.tie_word_embeddings, classic.tie_word_embeddings);
    EXPECT_EQ(saved.eos_token_ids, classic.eos_token_ids);
    ++twins;
  }
  EXPECT_GE(twins, 8);
  EXPECT_EQ(load_hf_config((golden / "llama3_style_saved").string()).eos_token_ids, (std::vector<int64_t>{2, 5, 7}));
}

// issue 34 item 11: configs transformers refuses, accepted silently before (made-up llama3
// frequencies, zero soft-caps that transformers divides by, a null TopK taking the default).
TEST(ConfigKeys, RefusesWhatTransformersRefuses) {
  for (const char* key : {"low_freq_factor", "high_freq_factor"}) {
    json rope = kLlama3Rope;
    rope.erase(key);
    EXPECT_EQ(parse_error(with(llama(), "rope_parameters", rope)),
              str("cfg.json: rope_parameters: '", key, "' is required for rope_type llama3"));
    json j = with(llama(), "rope_scaling", rope);
    j["rope_scaling"].erase("rope_theta");
    EXPECT_NE(parse_error(j).find(str("'", key, "' is required for rope_type llama3")), std::string::npos);
  }
  json gemma = with(with(with(llama(), "model_type", "gemma2"), "head_dim", 16), "query_pre_attn_scalar", 16);
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    EXPECT_EQ(parse_error(with(gemma, key, 0.0)),
              str("cfg.json: '", key, "' must be positive or null (null turns soft-capping off; transformers divides "
                  "by it), got 0.0"));
    EXPECT_NE(parse_error(with(gemma, key, -1.0)).find("must be positive or null"), std::string::npos);
  }
  // null: off.
  EXPECT_EQ(parse_hf_config(with(gemma, "final_logit_softcapping", nullptr), "cfg.json").final_softcap, 0);
  EXPECT_EQ(parse_hf_config(with(gemma, "attn_logit_softcapping", nullptr), "cfg.json").attn_softcap, 0);
  EXPECT_EQ(parse_hf_config(gemma, "cfg.json").final_softcap, 30.0);  // absent: the default
  json mixtral = with(with(llama(), "model_type", "mixtral"), "num_local_experts", 4);
  EXPECT_EQ(parse_hf_config(mixtral, "cfg.json").experts_per_token, 2);  // absent: the default
  EXPECT_EQ(parse_error(with(mixtral, "num_experts_per_tok", nullptr)),
            "cfg.json: 'num_experts_per_tok' must be a positive integer, got null");
}

// Phi3Config always has original_max_position_embeddings (4096 when absent), and it replaces
// the RoPE's own; transformers' generate recomputes the cache past it (longrope only).
TEST(ConfigKeys, Phi3OriginalLengthAndItsRecomputation) {
  json phi = with(with(llama(), "model_type", "phi3"), "max_position_embeddings", 131072);
  phi["rope_scaling"] = {{"type", "longrope"}, {"short_factor", std::vector<double>(8, 1.0)},
                         {"long_factor", std::vector<double>(8, 2.0)}, {"original_max_position_embeddings", 8192}};
  ModelConfig c = parse_hf_config(phi, "cfg.json");
  EXPECT_EQ(c.rope.original_max_position, 4096);
  EXPECT_EQ(c.recompute_cache_at, 4096);
  phi["original_max_position_embeddings"] = 2048;
  c = parse_hf_config(phi, "cfg.json");
  EXPECT_EQ(c.rope.original_max_position, 2048);
  EXPECT_EQ(c.recompute_cache_at, 2048);
  phi.erase("rope_scaling");
  EXPECT_EQ(parse_hf_config(phi, "cfg.json").recompute_cache_at, 0);  // default RoPE: the keys would not change
}

// issue 34 item 3: Shards beyond KvHeads replicate each KV head on Shards/KvHeads shards (the
// one their q heads use); a Shards neither dividing nor divided by KvHeads is refused.
TEST(ConfigKeys, ShardsBeyondTheKvHeadsReplicateThem) {
  const ModelConfig c = parse_hf_config(with(with(llama(), "num_attention_heads", 8), "num_key_value_heads", 2), "x");
  const Generics g4 = bind_generics(c, RunOptions{1, 64, 4, 16, std::nullopt});
  EXPECT_EQ(g4.kv_heads_per_shard(), 1);
  EXPECT_EQ(g4.kv_replicas(), 2);
  for (int64_t s = 0; s < 4; ++s) EXPECT_EQ(g4.kv_head_begin(s), s / 2);  // q heads 2s, 2s+1 of group s/2
  const Generics g8 = bind_generics(c, RunOptions{1, 64, 8, 16, std::nullopt});
  EXPECT_EQ(g8.kv_replicas(), 4);
  const Generics g2 = bind_generics(c, RunOptions{1, 64, 2, 16, std::nullopt});
  EXPECT_EQ(g2.kv_replicas(), 1);
  EXPECT_EQ(g2.kv_heads_per_shard(), 1);
  const ModelConfig three = parse_hf_config(
      with(with(with(llama(), "num_attention_heads", 12), "num_key_value_heads", 3), "hidden_size", 48), "x");
  EXPECT_EQ(error_of([&] { bind_generics(three, RunOptions{1, 64, 2, 16, std::nullopt}); }),
            "KvHeads=3 does not divide by Shards=2, nor Shards by KvHeads (the KV heads are split across the shards, "
            "or each replicated on Shards/KvHeads of them)");
}
