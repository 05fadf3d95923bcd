// The families of issue 28 (Mistral, Qwen 3, Gemma 2/3, Phi-3, OLMo 2, Granite, SmolLM3):
// config.json read in both spellings with each family's defaults, RoPE kinds computed as
// transformers computes them, every entry of a random model of each family tied to the
// others (contiguous, paged, packed, slots, stepped, generate) with sliding windows crossing
// pages, batch invariance bit for bit, the card `inspect` prints, and `linnet generate` /
// `linnet eval` end to end on 1, 2 and 3 ranks. Conformance with transformers itself is
// tests/conformance_test.cpp's (the fixtures of tools/golden).
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "architectures/hf_config.h"
#include "runtime/write_checkpoint.h"
#include "engine/generator.h"
#include "layers/card.h"
#include "layers/rope.h"
#include "command_checks.h"
#include "config_models.h"
#include "model_fixtures.h"
#include "mpi_run.h"

using namespace linnet;
using namespace linnet::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json base() {
  return json::parse(R"({"vocab_size": 97, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
    "intermediate_size": 48, "num_hidden_layers": 3, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
    "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2})");
}

// One small config per family, with its distinguishing features switched on (head dims apart
// from H / Heads, windows of 5 over pages of 8).
std::map<std::string, json> family_configs() {
  return {
      {"mistral", with(base(), {{"model_type", "mistral"}, {"head_dim", 12}, {"sliding_window", 5}})},
      {"qwen3", with(base(), {{"model_type", "qwen3"}, {"head_dim", 12}, {"use_sliding_window", true},
                              {"sliding_window", 5}, {"max_window_layers", 1},
                              {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0},
                                                {"original_max_position_embeddings", 16}}}})},
      {"gemma2", with(base(), {{"model_type", "gemma2"}, {"head_dim", 12}, {"query_pre_attn_scalar", 24},
                               {"sliding_window", 5}, {"attn_logit_softcapping", 3.0},
                               {"final_logit_softcapping", 5.0}})},
      {"gemma3", with(base(), {{"model_type", "gemma3_text"}, {"head_dim", 12}, {"query_pre_attn_scalar", 24},
                               {"sliding_window", 5}, {"sliding_window_pattern", 2}, {"rope_theta", 1e6},
                               {"rope_local_base_freq", 1e4}, {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}})},
      {"phi3", with(base(), {{"model_type", "phi3"}, {"num_key_value_heads", 4}, {"partial_rotary_factor", 0.75},
                             {"sliding_window", 5},
                             {"rope_scaling", {{"type", "longrope"}, {"short_factor", {1.0, 1.5, 2.0}},
                                               {"long_factor", {2.0, 4.0, 8.0}}}},
                             {"original_max_position_embeddings", 64}})},
      {"olmo2", with(base(), {{"model_type", "olmo2"}})},
      // OLMo 3 (issue 36): layers 0 and 2 slide with their own RoPE; the full layer's θ 1e4.
      {"olmo3", with(base(), {{"model_type", "olmo3"}, {"sliding_window", 5}, {"rope_theta", 1e4},
                              {"layer_types", {"sliding_attention", "full_attention", "sliding_attention"}}})},
      {"granite", with(base(), {{"model_type", "granite"}, {"embedding_multiplier", 12.0}, {"residual_multiplier", 0.22},
                                {"attention_multiplier", 0.1}, {"logits_scaling", 6.0}})},
      {"smollm3", with(base(), {{"model_type", "smollm3"}, {"no_rope_layers", {1, 0, 1}},
                                {"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}}})},
  };
}

}  // namespace

// ---- config.json ---------------------------------------------------------------------------

TEST(Families, EachFamilyReadsItsKeysAndDefaults) {
  const auto cfgs = family_configs();
  const ModelConfig mistral = parse(cfgs.at("mistral"));
  EXPECT_EQ(mistral.head_dim(), 12);
  EXPECT_EQ(*mistral.sliding_window, 5);
  EXPECT_FALSE(mistral.qkv_bias);
  // Qwen 3: head_dim defaults to 128 (its config class), q/k norms per head.
  const ModelConfig qwen3 = parse(with(base(), {{"model_type", "qwen3"}}));
  EXPECT_EQ(qwen3.head_dim(), 128);
  EXPECT_EQ(qwen3.qk_norm, ModelConfig::QkNorm::per_head);
  EXPECT_FALSE(qwen3.sliding_window);  // use_sliding_window defaults to false
  // Gemma 2's defaults: head_dim 256, tanh GELU, soft-caps 50 and 30, query_pre_attn_scalar
  // 256, tied embeddings, every other layer sliding with window 4096, √H in f32.
  const ModelConfig g2 = parse(with(base(), {{"model_type", "gemma2"}}));
  EXPECT_EQ(g2.head_dim(), 256);
  EXPECT_EQ(g2.activation, ModelConfig::Activation::gelu_tanh);
  EXPECT_EQ(g2.attn_softcap, 50);
  EXPECT_EQ(g2.final_softcap, 30);
  EXPECT_DOUBLE_EQ(*g2.attention_scale, 1.0 / 16);
  EXPECT_TRUE(g2.tie_word_embeddings);
  EXPECT_TRUE(g2.norm_plus_one && g2.post_norms && g2.pre_norms);
  EXPECT_EQ(*g2.sliding_window, 4096);
  EXPECT_TRUE(g2.layer_kind(0).sliding && !g2.layer_kind(1).sliding && g2.layer_kind(2).sliding);
  EXPECT_EQ(g2.embedding_scale, static_cast<double>(static_cast<float>(std::sqrt(32.0))));
  EXPECT_EQ(parse(with(base(), {{"model_type", "gemma2"}, {"final_logit_softcapping", nullptr}})).final_softcap, 0);
  // Gemma 3: one sliding layer in 6 is full by default; sliding layers take the local RoPE.
  const ModelConfig g3 = parse(with(base(), {{"model_type", "gemma3_text"}, {"num_hidden_layers", 7}}));
  EXPECT_EQ(g3.rope_theta, 1e6);
  ASSERT_TRUE(g3.local_rope);
  EXPECT_EQ(g3.local_rope->theta, 1e4);
  EXPECT_EQ(g3.qk_norm, ModelConfig::QkNorm::per_head);
  for (int64_t i = 0; i < 7; ++i) {
    EXPECT_EQ(g3.layer_kind(i).sliding, i != 5) << i;
    EXPECT_EQ(g3.layer_kind(i).rope, i != 5 ? 1 : 0) << i;
  }
  EXPECT_EQ(g3.final_softcap, 0);
  EXPECT_NE(error_of(with(base(), {{"model_type", "gemma3"}})).find("runs the text model, model_type gemma3_text"),
            std::string::npos);
  EXPECT_NE(error_of(with(base(), {{"model_type", "gemma2"}, {"use_bidirectional_attention", true}})).find("causal"),
            std::string::npos);
  // Phi-3: fused tensors, partial rotary, "longrope" (and its old name "su").
  const ModelConfig phi3 = parse(cfgs.at("phi3"));
  EXPECT_TRUE(phi3.fused_qkv && phi3.fused_gate_up);
  EXPECT_EQ(phi3.rotary_dim(), 6);
  EXPECT_EQ(phi3.rope.type, RopeScaling::Type::longrope);
  EXPECT_EQ(phi3.rope.original_max_position, 64);  // Phi-3's top-level key wins
  EXPECT_DOUBLE_EQ(phi3.rope.factor, 1.0);          // max_position_embeddings / original
  json su = cfgs.at("phi3");
  su["rope_scaling"]["type"] = "su";
  EXPECT_EQ(parse(su).rope.type, RopeScaling::Type::longrope);
  su["rope_scaling"]["short_factor"] = {1.0, 2.0};
  EXPECT_NE(error_of(su).find("short_factor has 2 entries; the rotary dim 6 needs 3"), std::string::npos) << error_of(su);
  // OLMo 2: post-norms only, q/k norms over the whole projection.
  const ModelConfig olmo2 = parse(cfgs.at("olmo2"));
  EXPECT_TRUE(!olmo2.pre_norms && olmo2.post_norms);
  EXPECT_EQ(olmo2.qk_norm, ModelConfig::QkNorm::whole);
  EXPECT_EQ(olmo2.rms_norm_eps, 1e-6);
  EXPECT_EQ(parse(with(base(), {{"model_type", "olmo2"}, {"rms_norm_eps", nullptr}})).rms_norm_eps, 1e-5);
  // OLMo 3: OLMo 2's norms; three sliding layers then one full by default, within 4096; the
  // sliding layers' RoPE is default RoPE of θ 5e5 whatever the top-level rope_theta says.
  const ModelConfig olmo3 = parse(with(base(), {{"model_type", "olmo3"}, {"num_hidden_layers", 5}, {"rms_norm_eps", nullptr}}));
  EXPECT_TRUE(!olmo3.pre_norms && olmo3.post_norms);
  EXPECT_EQ(olmo3.qk_norm, ModelConfig::QkNorm::whole);
  EXPECT_EQ(olmo3.rms_norm_eps, 1e-5);
  EXPECT_EQ(olmo3.sliding_window, 4096);
  EXPECT_EQ(olmo3.rope_theta, 5e5);
  ASSERT_TRUE(olmo3.local_rope);
  EXPECT_EQ(olmo3.local_rope->theta, 5e5);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(olmo3.layer_kind(i).sliding, i != 3) << i;
    EXPECT_EQ(olmo3.layer_kind(i).rope, i != 3 ? 1 : 0) << i;
  }
  const ModelConfig olmo3_given = parse(cfgs.at("olmo3"));
  EXPECT_EQ(olmo3_given.rope_theta, 1e4);
  EXPECT_EQ(olmo3_given.local_rope->theta, 5e5);
  EXPECT_EQ(olmo3_given.sliding_window, 5);
  // rope_scaling reaches the full layers only; rope_parameters.sliding_attention names the other base.
  const ModelConfig olmo3_v5 = parse(with(cfgs.at("olmo3"),
      {{"rope_theta", nullptr}, {"rope_parameters", {{"full_attention", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e4}}},
                                                     {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e3}}}}}}));
  EXPECT_EQ(olmo3_v5.rope_theta, 1e4);
  EXPECT_EQ(olmo3_v5.rope.type, RopeScaling::Type::linear);
  EXPECT_EQ(olmo3_v5.local_rope->theta, 1e3);
  EXPECT_EQ(olmo3_v5.local_rope->scaling.type, RopeScaling::Type::none);
  // sliding_window null: no layer slides, the sliding_attention layers keep their RoPE.
  const ModelConfig olmo3_nowindow = parse(with(cfgs.at("olmo3"), {{"sliding_window", nullptr}}));
  EXPECT_FALSE(olmo3_nowindow.any_sliding());
  EXPECT_EQ(olmo3_nowindow.layer_kind(0).rope, 1);
  // One RoPE object is not read so by transformers' Olmo3Config (it would run θ 5e5 everywhere).
  EXPECT_NE(error_of(with(cfgs.at("olmo3"), {{"rope_theta", nullptr},
                                             {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e4}}}}))
                .find("must be the per-layer-type form"),
            std::string::npos);
  // Granite: the four multipliers (the f32 values).
  const ModelConfig granite = parse(cfgs.at("granite"));
  EXPECT_EQ(granite.embedding_scale, 12.0);
  EXPECT_EQ(granite.residual_multiplier, static_cast<double>(0.22f));
  EXPECT_EQ(*granite.attention_scale, static_cast<double>(0.1f));
  EXPECT_EQ(granite.logits_scaling, 6.0);
  // SmolLM3: no_rope_layers (default: every 4th layer has none), RoPE θ 2e6 by default, tied.
  const ModelConfig smol = parse(with(base(), {{"model_type", "smollm3"}, {"num_hidden_layers", 8}}));
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(smol.layer_kind(i).rope, (i + 1) % 4 == 0 ? -1 : 0) << i;
  EXPECT_EQ(smol.rope_theta, 2e6);
  EXPECT_TRUE(smol.tie_word_embeddings);
  // Each family's own keys are refused elsewhere, by name.
  EXPECT_NE(error_of(with(base(), {{"no_rope_layers", {1, 0, 1}}})).find("'no_rope_layers'"), std::string::npos);
  EXPECT_NE(error_of(with(base(), {{"model_type", "mistral"}, {"query_pre_attn_scalar", 8}})).find("query_pre_attn_scalar"),
            std::string::npos);
  EXPECT_NE(error_of(with(base(), {{"model_type", "qwen3"}, {"logits_scaling", 2.0}})).find("'logits_scaling'"),
            std::string::npos);
  EXPECT_NE(error_of(with(base(), {{"model_type", "olmo2"}, {"final_logit_softcapping", 30.0}})).find("soft-capping"),
            std::string::npos);
  EXPECT_NE(error_of(with(base(), {{"model_type", "qwen3"}, {"partial_rotary_factor", 0.5}})).find("partial_rotary_factor"),
            std::string::npos);
  // Mixtures of experts other than Mixtral's, Qwen3-MoE's and OLMoE's (tests/moe_test.cpp) are refused.
  for (const char* moe : {"qwen2_moe", "granitemoe"})
    EXPECT_NE(error_of(with(base(), {{"model_type", moe}})).find("mixture-of-experts"), std::string::npos) << moe;
  EXPECT_NE(error_of(with(base(), {{"model_type", "deepseek_v32"}})).find("sparse attention's indexer"),
            std::string::npos);
  EXPECT_NE(error_of(with(base(), {{"model_type", "qwen3"}, {"num_experts", 8}})).find("mixture-of-experts"),
            std::string::npos);
}

// Every RoPE kind in both spellings: the classic rope_scaling + rope_theta (+ Gemma 3's
// rope_local_base_freq, Phi-3's partial_rotary_factor) and transformers 5's rope_parameters.
TEST(Families, RopeKindsReadTheSameInBothSpellings) {
  auto same = [](const ModelConfig& a, const ModelConfig& b, const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.rope.type, b.rope.type);
    EXPECT_EQ(a.rope.factor, b.rope.factor);
    EXPECT_EQ(a.rope.original_max_position, b.rope.original_max_position);
    EXPECT_EQ(a.rope.short_factor, b.rope.short_factor);
    EXPECT_EQ(a.rope.long_factor, b.rope.long_factor);
    EXPECT_EQ(a.rope.attention_factor, b.rope.attention_factor);
    EXPECT_EQ(a.partial_rotary_factor, b.partial_rotary_factor);
    EXPECT_EQ(a.local_rope.has_value(), b.local_rope.has_value());
    if (a.local_rope && b.local_rope) {
      EXPECT_EQ(a.local_rope->theta, b.local_rope->theta);
    }
    EXPECT_EQ(rope_inv_freq(a), rope_inv_freq(b));
  };
  const json yarn = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16},
                     {"beta_fast", 16}, {"mscale", 0.7}, {"mscale_all_dim", 0.5}};
  const json dynamic = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  const json longrope = {{"rope_type", "longrope"}, {"short_factor", {1.0, 1.5, 2.0}}, {"long_factor", {2.0, 4.0, 8.0}},
                         {"original_max_position_embeddings", 16}};
  for (const auto& [type, scaling] : std::vector<std::pair<std::string, json>>{{"qwen3", yarn}, {"llama", dynamic},
                                                                              {"phi3", longrope}}) {
    json classic = with(base(), {{"model_type", type}, {"rope_theta", 5e5}, {"rope_scaling", scaling}});
    json v5 = with(base(), {{"model_type", type}});
    v5["rope_parameters"] = scaling;
    v5["rope_parameters"]["rope_theta"] = 5e5;
    if (type == "phi3") {
      classic["partial_rotary_factor"] = 0.75;
      v5["rope_parameters"]["partial_rotary_factor"] = 0.75;
      classic["num_key_value_heads"] = v5["num_key_value_heads"] = 4;
    }
    same(parse(classic), parse(v5), type);
  }
  // Gemma 3: classic rope_theta / rope_local_base_freq / rope_scaling, or the per-layer-type form.
  const json classic = with(base(), {{"model_type", "gemma3_text"}, {"rope_theta", 1e6}, {"rope_local_base_freq", 1e4},
                                     {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}});
  json v5 = with(base(), {{"model_type", "gemma3_text"}});
  v5["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
                           {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  same(parse(classic), parse(v5), "gemma3_text");
  EXPECT_EQ(parse(v5).rope.type, RopeScaling::Type::linear);
  // The per-layer-type form stays refused where transformers runs one default RoPE instead.
  for (const char* type : {"llama", "qwen2", "mistral", "qwen3", "gemma2", "phi3"})
    EXPECT_NE(error_of(with(base(), {{"model_type", type}, {"rope_parameters", v5["rope_parameters"]}}))
                  .find("per-layer-type form"),
              std::string::npos)
        << type;
}

TEST(Families, RopeFrequenciesAsTransformersComputesThem) {
  ModelConfig c = parse(with(base(), {{"model_type", "qwen3"}, {"head_dim", 16},
                                      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0},
                                                        {"original_max_position_embeddings", 16}}}}));
  // yarn: attention factor 0.1·ln 4 + 1; the ramp keeps the fastest dims and divides the slowest by 4.
  RopeFrequencies f = rope_frequencies(c, layer_rope(c, 0));
  EXPECT_FLOAT_EQ(f.scale, static_cast<float>(0.1 * std::log(4.0) + 1));
  EXPECT_FLOAT_EQ(f.inv_freq[0], 1.0f);
  EXPECT_NEAR(f.inv_freq[7], 1.0 / std::pow(1e4, 14.0 / 16) / 4, 1e-6 * f.inv_freq[7]);
  // dynamic: the loaded frequencies up to max_position_embeddings, a larger base past it.
  c = parse(with(base(), {{"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}}}));
  const auto plain = rope_frequencies(parse(base()), layer_rope(parse(base()), 0)).inv_freq;
  EXPECT_EQ(rope_frequencies(c, layer_rope(c, 0), 64).inv_freq, plain);
  const auto grown = rope_frequencies(c, layer_rope(c, 0), 100).inv_freq;
  EXPECT_EQ(grown[0], 1.0f);
  // base · (2·100/64 − 1)^(8/6)
  EXPECT_NEAR(grown[3], 1.0 / std::pow(1e4 * std::pow(2.0 * 100 / 64 - 1, 8.0 / 6), 6.0 / 8), 1e-6 * grown[3]);
  EXPECT_TRUE(rope_depends_on_length(c.rope));
  // longrope: short factors up to original_max_position_embeddings, long past it; sqrt(1 + ln f / ln L).
  c = parse(with(base(), {{"model_type", "phi3"}, {"num_key_value_heads", 4}, {"original_max_position_embeddings", 16},
                          {"rope_scaling", {{"type", "longrope"}, {"short_factor", {1, 1, 1, 1}},
                                            {"long_factor", {2, 2, 2, 2}}}}}));
  const RopeFrequencies s = rope_frequencies(c, layer_rope(c, 0), 16), l = rope_frequencies(c, layer_rope(c, 0), 17);
  EXPECT_EQ(s.inv_freq, plain);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_FLOAT_EQ(l.inv_freq[i], plain[i] / 2);
  EXPECT_FLOAT_EQ(s.scale, static_cast<float>(std::sqrt(1 + std::log(4.0) / std::log(16.0))));
}

// ---- the entries on random models of each family ---------------------------------------------

class FamilyEntries : public ::testing::TestWithParam<std::string> {};

// Through every way into the cache — prefill and decode, prefill_slots, shuffled pages,
// packed prefill with a step beside it — a sequence of 20 gets forward's logits; log_probs
// are forward's log-softmax; generate is decode's argmax. Windows of 5 over pages of 8.
TEST_P(FamilyEntries, EveryEntryAgreesWithForward) { expect_every_entry_agrees_with_forward(family_configs().at(GetParam())); }

// A sequence's logits through the paged entries and its log-probs through the packed ones are
// the same bits alone and among others (docs/numerics.md), in f32 and bf16.
TEST_P(FamilyEntries, BatchInvariantBitForBit) { expect_batch_invariant_bit_for_bit(family_configs().at(GetParam())); }

INSTANTIATE_TEST_SUITE_P(Family, FamilyEntries,
                         ::testing::Values("mistral", "qwen3", "gemma2", "gemma3", "phi3", "olmo2", "granite", "smollm3", "olmo3"),
                         [](const auto& info) { return info.param; });

// ---- the card and the memory plan ------------------------------------------------------------

TEST(Families, InspectNamesTheFamilysBlocksAndGenerics) {
  const ModelConfig g2 = parse(family_configs().at("gemma2"));
  EXPECT_EQ(card::extra_generics(g2), (std::vector<std::pair<std::string, int64_t>>{{"D", 12}, {"Window", 5}}));
  std::string all;
  for (const auto& b : card::blocks_for(g2)) {
    all += b.name + "\n" + b.header + "\n";
    for (const auto& m : b.members) all += m + "\n";
  }
  for (const char* want : {"gemma2::DecoderLayer<", "sub post_attention_norm: RmsNorm1p<H, T>", "sub mlp: GeGlu<H, Inner / Shards, T>",
                           "sub q_proj: Linear<H, (Heads / Shards) * D, T>", "const softcap: f32 = 3",
                           "const final_softcap: f32 = 5", "const sliding_layers: [0, 2]", "GeGlu\nstd.nn.mlp::GeGlu<"})
    EXPECT_NE(all.find(want), std::string::npos) << want << "\n" << all;
  // A Llama-shaped model keeps the seed's card.
  EXPECT_EQ(card::blocks_for(parse(base())).size(), card::blocks().size());
  EXPECT_TRUE(card::extra_generics(parse(base())).empty());
  // OLMo 2's whole-projection norms are split by rows; Phi-3's parts read the fused tensors.
  const ModelConfig olmo2 = parse(family_configs().at("olmo2"));
  const Generics g = bind_generics(olmo2, RunOptions{1, 64, 2, 64, std::nullopt});
  int found = 0;
  for (const auto& p : parameter_specs(olmo2, g))
    if (p.card_name == "layers[0].attention.q_norm.weight") {
      EXPECT_EQ(p.split, Split::rows);
      EXPECT_EQ(p.shard_shape(), (Shape{16}));
      ++found;
    }
  EXPECT_EQ(found, 1);
  const ModelConfig phi3 = parse(family_configs().at("phi3"));
  const Generics gp = bind_generics(phi3, RunOptions{1, 64, 2, 64, std::nullopt});
  for (const auto& p : parameter_specs(phi3, gp))
    if (p.card_name == "layers[1].attention.k_proj.weight") {
      EXPECT_EQ(p.hf_name, "model.layers.1.self_attn.qkv_proj.weight");
      EXPECT_EQ(p.stored_shape(), (Shape{96, 32}));
      EXPECT_EQ(p.row_offset, 32);
      EXPECT_EQ(p.shard_range(1), (std::pair<int64_t, int64_t>{16, 32}));  // rows 48…63 of the tensor
    }
}

// ---- generate and eval end to end ------------------------------------------------------------

namespace {

// A random checkpoint of a family with the fixtures' byte-level BPE tokenizer (vocab 1398),
// 6 heads (Shards 2 and 3).
fs::path family_checkpoint(const std::string& family) {
  json j = family_configs().at(family);
  j["vocab_size"] = 1398;
  j["hidden_size"] = 48;
  j["num_attention_heads"] = 6;
  j["num_key_value_heads"] = 6;
  j["max_position_embeddings"] = 256;
  if (j.contains("rope_scaling") && j["rope_scaling"].value("type", "") == "longrope") {
    j["rope_scaling"]["short_factor"] = {1.0, 1.2, 1.5};
    j["rope_scaling"]["long_factor"] = {2.0, 3.0, 4.0};
    j["original_max_position_embeddings"] = 24;  // prompts pass it: the long factors
  }
  ModelConfig c = parse(j);
  c.eos_token_ids = {1};
  return random_checkpoint_with_tokenizer("linnet_family_" + family, c, 23);
}

}  // namespace

// `linnet generate` and `linnet eval`: each prompt alone gives what it gives among others, and
// 2 and 3 shards give what one does (greedy tokens; log-likelihoods within f32 noise).
TEST(Families, GenerateAndEvalOnOneTwoAndThreeRanks) {
  for (const std::string family : {"gemma2", "olmo2", "phi3"}) {
    SCOPED_TRACE(family);
    expect_generate_and_eval_agree(family_checkpoint(family), family, {{2, {}}, {3, {}}}, {{3, {}}});
  }
}

// `linnet serve` on every family, on two ranks: greedy completions (log-probs asked for too)
// are what `linnet generate` gives the same prompts on one rank, token for token.
TEST(Families, ServeOnTwoRanksAnswersAsGenerateDoes) {
  for (const auto& [family, config] : family_configs()) {
    SCOPED_TRACE(family);
    expect_serve_answers_as_generate(family_checkpoint(family), family, {2, {}});
  }
}

// ---- the engine with a RoPE that follows the sequence's length -------------------------------

// Dynamic NTK past max_position_embeddings (16 here): each prompt runs whole (never chunked
// by the step's token budget, no prefix pages shared), so a request's greedy tokens are the
// same alone as among 12 others in steps of 24 tokens, and equal generate's from one prefill.
TEST(Families, DynamicRopeGeneratesTheSameAloneAndAmongOthers) {
  json j = family_configs().at("smollm3");
  j["max_position_embeddings"] = 16;
  auto run = [&](const std::vector<engine::Request>& rs, int64_t budget) {
    ConfigModel m(j, DType::f32, 16);
    engine::Generator gen(*m.m, engine::SchedulerLimits{0, 16, budget}, {});
    for (const auto& r : rs) EXPECT_EQ(gen.submit(r), "");
    std::map<size_t, std::vector<int32_t>> out;
    while (!gen.idle())
      for (auto& c : gen.step()) out[c.index] = c.tokens;
    return out;
  };
  std::vector<engine::Request> all;
  for (size_t i = 0; i < 13; ++i) {
    engine::Request r;
    r.index = i;
    for (int64_t t : random_ids(9 + (i * 5) % 14, 600 + static_cast<uint32_t>(i % 4 == 0 ? 0 : i)))
      r.prompt.push_back(static_cast<int32_t>(t));  // requests 0, 4, 8, 12 share a prompt's prefix
    r.params.max_new_tokens = 8;
    all.push_back(r);
  }
  const auto mixed = run(all, 24);
  for (size_t i : {size_t{0}, size_t{3}, size_t{12}}) {
    EXPECT_EQ(run({all[i]}, 512).at(i), mixed.at(i)) << "request " << i;
    // The entries: prefill of the whole prompt, then generate.
    ConfigModel m(j, DType::f32, 1);
    std::vector<int64_t> p(all[i].prompt.begin(), all[i].prompt.end());
    const int64_t n = static_cast<int64_t>(p.size());
    const Tensor l = m->prefill(ids({1, n}, p), 0);
    const auto v = l.to_floats();
    const int64_t first = std::max_element(v.begin(), v.end()) - v.begin();
    const auto rest = m->generate(column({first}), static_cast<int32_t>(n), 7).to_ints();
    std::vector<int32_t> want = {static_cast<int32_t>(first)};
    for (int64_t t : rest) want.push_back(static_cast<int32_t>(t));
    EXPECT_EQ(mixed.at(i), want) << "request " << i;
  }
}

// `linnet init --config` and random checkpoints write config.json with to_hf_config: each
// family reads back as it was.
TEST(Families, ConfigRoundTripsThroughJson) {
  for (const auto& [name, j] : family_configs()) {
    SCOPED_TRACE(name);
    const ModelConfig a = parse(j), b = parse(to_hf_config(a));
    EXPECT_EQ(a.model_type, b.model_type);
    EXPECT_EQ(a.head_dim(), b.head_dim());
    EXPECT_EQ(a.sliding_window, b.sliding_window);
    for (int64_t i = 0; i < a.layers; ++i) {
      EXPECT_EQ(a.layer_kind(i).sliding, b.layer_kind(i).sliding) << i;
      EXPECT_EQ(a.layer_kind(i).rope, b.layer_kind(i).rope) << i;
    }
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.rope.type, b.rope.type);
    EXPECT_EQ(rope_inv_freq(a), rope_inv_freq(b));
    EXPECT_EQ(a.local_rope.has_value(), b.local_rope.has_value());
    EXPECT_EQ(a.partial_rotary_factor, b.partial_rotary_factor);
    EXPECT_EQ(a.qk_norm, b.qk_norm);
    EXPECT_EQ(a.attn_softcap, b.attn_softcap);
    EXPECT_EQ(a.final_softcap, b.final_softcap);
    EXPECT_EQ(a.attention_scale, b.attention_scale);
    EXPECT_EQ(a.embedding_scale, b.embedding_scale);
    EXPECT_EQ(a.residual_multiplier, b.residual_multiplier);
    EXPECT_EQ(a.logits_scaling, b.logits_scaling);
    EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
    EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  }
}
