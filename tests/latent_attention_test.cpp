// Multi-head latent attention (layers/latent_attention.h) and the DeepSeek families around it
// (architectures/deepseek.cpp): the configs as transformers' DeepseekV2Config and
// DeepseekV3Config read them, the latent cache's size on every shard count, the FP8 kv_b_proj
// counted as it is held, and the multi-token-prediction layer skipped. Their numbers against
// transformers: the fixtures deepseek_v2*, deepseek_v3*, fp8_deepseek_v3_f32
// (tests/conformance_test.cpp), and MoeEntries/deepseek_v3 (tests/moe_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "architectures/hf_config.h"
#include "architectures/presets.h"
#include "config_models.h"
#include "core/backend.h"
#include "layers/footprint.h"
#include "layers/kv_cache.h"
#include "layers/model_definition.h"
#include "layers/parameters.h"
#include "mpi_run.h"

using namespace linnet;
using namespace linnet::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json v3_base() {
  return json::parse(R"({"model_type": "deepseek_v3", "vocab_size": 97, "hidden_size": 32, "num_attention_heads": 8,
    "intermediate_size": 24, "num_hidden_layers": 3, "max_position_embeddings": 64, "torch_dtype": "float32",
    "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "n_group": 2, "topk_group": 1,
    "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6,
    "first_k_dense_replace": 1, "num_nextn_predict_layers": 0})");
}

const fs::path kGolden = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden";

}  // namespace

// DeepseekV3Config's defaults (DeepSeek-V3's own shapes), its keys, and the writer read back.
TEST(LatentAttention, DeepseekV3ConfigReadAsTransformersReadsIt) {
  const ModelConfig d = parse(json::parse(R"({"model_type": "deepseek_v3", "vocab_size": 97, "hidden_size": 64,
    "num_attention_heads": 4, "intermediate_size": 24, "num_hidden_layers": 4})"));
  ASSERT_TRUE(d.mla);
  EXPECT_EQ(d.mla->q_lora, 1536);
  EXPECT_EQ(d.mla->kv_lora, 512);
  EXPECT_EQ(d.mla->nope, 128);
  EXPECT_EQ(d.mla->rope, 64);
  EXPECT_EQ(d.mla->v, 128);
  EXPECT_TRUE(d.mla->interleaved);
  EXPECT_EQ(d.head_dim(), 192);    // qk_nope + qk_rope: the query head
  EXPECT_EQ(d.rotary_dim(), 64);   // RoPE on qk_rope_head_dim
  EXPECT_EQ(d.kv_heads, 4);
  EXPECT_EQ(d.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(*d.attention_scale, 1.0 / std::sqrt(192.0));
  EXPECT_EQ(d.experts, 256);
  EXPECT_EQ(d.experts_per_token, 8);
  EXPECT_EQ(d.expert_inner, 2048);
  EXPECT_EQ(d.shared_expert_inner, 2048);
  EXPECT_EQ(d.expert_choice->groups, 8);
  EXPECT_EQ(d.expert_choice->keep_groups, 4);
  EXPECT_EQ(d.expert_choice->scale, 2.5f);
  EXPECT_TRUE(d.expert_choice->sigmoid && d.expert_choice->normalize && d.router_bias);
  EXPECT_TRUE(!d.sparse_layer(2) && d.sparse_layer(3));  // first_k_dense_replace 3
  EXPECT_EQ(d.mtp_layers, 1);

  // q_lora_rank null: one q_proj; rope_interleave false: halves; yarn's mscale_all_dim in the scale.
  const json yarn = {{"rope_type", "yarn"}, {"factor", 40.0}, {"original_max_position_embeddings", 4096},
                     {"mscale", 1.0}, {"mscale_all_dim", 1.0}, {"beta_fast", 32}, {"beta_slow", 1}};
  const ModelConfig b = parse(with(v3_base(), {{"q_lora_rank", nullptr}, {"rope_interleave", false},
                                               {"rope_scaling", yarn}, {"attention_bias", true}}));
  EXPECT_EQ(b.mla->q_lora, 0);
  EXPECT_FALSE(b.mla->interleaved);
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_DOUBLE_EQ(*b.attention_scale, 1.0 / std::sqrt(12.0) * m * m);
  EXPECT_TRUE(b.qkv_bias && b.o_bias);
  // The writer, read back: the same model (head_dim is not written: transformers sets it).
  const json w = to_hf_config(b);
  EXPECT_FALSE(w.contains("head_dim"));
  const ModelConfig back = parse(w);
  ASSERT_TRUE(back.mla);
  EXPECT_EQ(back.mla->q_lora, 0);
  EXPECT_EQ(back.mla->kv_lora, b.mla->kv_lora);
  EXPECT_EQ(back.mla->nope, b.mla->nope);
  EXPECT_EQ(back.mla->rope, b.mla->rope);
  EXPECT_EQ(back.mla->v, b.mla->v);
  EXPECT_EQ(back.mla->interleaved, b.mla->interleaved);
  EXPECT_EQ(*back.attention_scale, *b.attention_scale);
  EXPECT_TRUE(*back.expert_choice == *b.expert_choice);
  // Kimi K2's published model_type (its remote code's name) is DeepSeek V3's network, as
  // transformers reads it inside Kimi K2.5.
  const ModelConfig kimi = parse(with(v3_base(), {{"model_type", "kimi_k2"}, {"architectures", {"DeepseekV3ForCausalLM"}}}));
  EXPECT_EQ(kimi.model_type, "deepseek_v3");
  EXPECT_TRUE(kimi.mla && kimi.expert_choice);
  // Refused, naming the rule.
  EXPECT_NE(error_of(with(v3_base(), {{"num_key_value_heads", 4}})).find("latent attention expands keys and values per "
                                                                          "query head"),
            std::string::npos);
  EXPECT_NE(error_of(with(v3_base(), {{"qk_rope_head_dim", 5}})).find("qk_rope_head_dim 5 must be even"),
            std::string::npos);
  EXPECT_NE(error_of(with(v3_base(), {{"num_experts", 8}})).find("not read by transformers' deepseek_v3"),
            std::string::npos);
}

// DeepseekV2Config: the softmax router (greedy or group_limited_greedy), never renormalised,
// rotary pairs always; what transformers does not read but DeepSeek's own code did is refused.
TEST(LatentAttention, DeepseekV2ConfigReadAsTransformersReadsIt) {
  const json v2 = with(v3_base(), {{"model_type", "deepseek_v2"}, {"topk_method", "group_limited_greedy"}});
  const ModelConfig c = parse(v2);
  ASSERT_TRUE(c.mla && c.expert_choice);
  EXPECT_TRUE(c.mla->interleaved);  // view_as_complex: pairs
  EXPECT_FALSE(c.expert_choice->sigmoid);
  EXPECT_FALSE(c.expert_choice->group_top2);  // a group scores its best
  EXPECT_EQ(c.expert_choice->masked, 0.0f);
  EXPECT_TRUE(c.expert_choice->weights_of_choices);
  EXPECT_FALSE(c.expert_choice->normalize);
  EXPECT_EQ(c.expert_choice->groups, 2);
  EXPECT_FALSE(c.router_bias);
  EXPECT_EQ(c.mtp_layers, 0);
  EXPECT_EQ(parse(with(v2, {{"topk_method", "greedy"}})).expert_choice->groups, 1);
  const ModelConfig back = parse(to_hf_config(c));
  EXPECT_TRUE(*back.expert_choice == *c.expert_choice);
  EXPECT_EQ(back.mla->q_lora, c.mla->q_lora);
  EXPECT_NE(error_of(with(v2, {{"topk_method", "noaux_tc"}})).find("unsupported topk_method 'noaux_tc'"),
            std::string::npos);
  EXPECT_NE(error_of(with(v2, {{"norm_topk_prob", true}})).find("'norm_topk_prob' = true is not read"), std::string::npos);
  EXPECT_NE(error_of(with(v2, {{"moe_layer_freq", 2}})).find("'moe_layer_freq' = 2 is not read"), std::string::npos);
  EXPECT_NE(error_of(with(v2, {{"n_routed_experts", 8}, {"num_experts", 16}})).find("disagree"), std::string::npos);
}

// Mistral4Config: its defaults, the query scaling's keys required (transformers multiplies by
// them unconditionally), its default RoPE refused (transformers' fails on it), the router in T,
// the experts in transformers' fused layout; the writer read back.
TEST(LatentAttention, Mistral4ConfigReadAsTransformersReadsIt) {
  const json rope = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 128.0},
                     {"original_max_position_embeddings", 8192}, {"llama_4_scaling_beta", 0.1},
                     {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  const json m4 = json{{"model_type", "mistral4"}, {"vocab_size", 97}, {"hidden_size", 64}, {"num_attention_heads", 4},
                       {"intermediate_size", 24}, {"num_hidden_layers", 2}, {"rope_parameters", rope}};
  const ModelConfig d = parse(m4);
  ASSERT_TRUE(d.mla && d.expert_choice);
  EXPECT_EQ(d.mla->q_lora, 1024);
  EXPECT_EQ(d.mla->kv_lora, 256);
  EXPECT_EQ(d.mla->nope, 64);
  EXPECT_EQ(d.mla->rope, 64);
  EXPECT_EQ(d.mla->v, 128);
  EXPECT_TRUE(d.mla->interleaved);
  EXPECT_EQ(d.mla->query_scale_beta, 0.1f);
  EXPECT_EQ(d.mla->query_scale_period, 8192);
  EXPECT_EQ(d.experts, 128);
  EXPECT_EQ(d.experts_per_token, 4);
  EXPECT_EQ(d.expert_inner, 2048);
  EXPECT_FALSE(d.expert_choice->sigmoid);
  EXPECT_EQ(d.expert_choice->masked, 0.0f);
  EXPECT_TRUE(d.expert_choice->normalize);
  EXPECT_TRUE(d.router_in_model_dtype);
  EXPECT_FALSE(d.router_bias);
  EXPECT_EQ(d.mtp_layers, 0);
  EXPECT_TRUE(d.sparse_layer(0));  // first_k_dense_replace 0
  const Generics g = bind_generics(d, RunOptions{1, 32, 1, 8, std::nullopt});
  bool fused = false;
  for (const ParamSpec& p : parameter_specs(d, g)) {
    if (p.card_name == "layers[0].mlp.experts[3].up.weight") {
      fused = true;
      EXPECT_EQ(p.hf_name, "model.layers.0.mlp.experts.gate_up_proj");
      EXPECT_EQ(p.stored, Shape({128 * 2 * 2048, 64}));
      EXPECT_EQ(p.row_offset, 3 * 2 * 2048 + 2048);
    }
    if (p.card_name == "layers[0].mlp.router.weight") EXPECT_FALSE(p.dtype.has_value());  // in T, not f32
  }
  EXPECT_TRUE(fused);
  const ModelConfig back = parse(to_hf_config(d));
  EXPECT_EQ(back.mla->query_scale_beta, d.mla->query_scale_beta);
  EXPECT_EQ(back.mla->query_scale_period, d.mla->query_scale_period);
  EXPECT_EQ(back.mla->q_lora, d.mla->q_lora);
  EXPECT_TRUE(*back.expert_choice == *d.expert_choice);
  EXPECT_EQ(back.rope.type, d.rope.type);
  EXPECT_EQ(*back.attention_scale, *d.attention_scale);
  auto refused = [&](const json& j, const std::string& what) {
    const std::string e = error_of(j);
    EXPECT_NE(e.find(what), std::string::npos) << j.dump() << ": " << e;
  };
  json no_rope = m4;
  no_rope.erase("rope_parameters");
  refused(no_rope, "mistral4 needs rope_parameters");
  json no_beta = m4;
  no_beta["rope_parameters"].erase("llama_4_scaling_beta");
  refused(no_beta, "rope_parameters.llama_4_scaling_beta is required");
  json plain = m4;
  plain["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"llama_4_scaling_beta", 0.1},
                              {"original_max_position_embeddings", 8192}};
  refused(plain, "rope_type default is not run by transformers' mistral4");
  json partial = m4;
  partial["rope_parameters"]["partial_rotary_factor"] = 1.0;
  refused(partial, "must be qk_rope_head_dim / (qk_nope_head_dim + qk_rope_head_dim)");
}

// Mistral Small 4 as it ships: Mistral 3's multimodal config around a mistral4 text model. The
// text model is text_config; the wrapper's tie_word_embeddings (default true, as transformers
// ties it), dtype and quantization_config are the ones that apply; the mistral-4 preset is the
// published shape. Its numbers: the fixture mistral3_mistral4 (tests/conformance_test.cpp).
TEST(LatentAttention, Mistral3WrapperIsReadAsItsTextModel) {
  const json rope = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0},
                     {"original_max_position_embeddings", 16}, {"llama_4_scaling_beta", 0.1}};
  const json text = {{"model_type", "mistral4"}, {"vocab_size", 97}, {"hidden_size", 64}, {"num_attention_heads", 4},
                     {"intermediate_size", 24}, {"num_hidden_layers", 2}, {"rope_parameters", rope},
                     {"tie_word_embeddings", false}, {"torch_dtype", "float32"}};
  json wrapper = {{"model_type", "mistral3"}, {"architectures", {"Mistral3ForConditionalGeneration"}},
                  {"text_config", text}, {"vision_config", {{"model_type", "pixtral"}}}, {"dtype", "bfloat16"}};
  const ModelConfig c = parse(wrapper);
  EXPECT_EQ(c.model_type, "mistral4");
  EXPECT_EQ(c.multimodal, "mistral3");
  EXPECT_TRUE(c.tie_word_embeddings);  // the wrapper's default, not text_config's false
  EXPECT_EQ(c.dtype, DType::bf16);     // the wrapper's dtype
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.mla->query_scale_period, 16);
  wrapper["tie_word_embeddings"] = false;
  EXPECT_FALSE(parse(wrapper).tie_word_embeddings);
  json no_text = wrapper;
  no_text.erase("text_config");
  EXPECT_NE(error_of(no_text).find("model_type 'mistral3' (a multimodal checkpoint) needs its text_config"),
            std::string::npos);
  json ministral = wrapper;
  ministral["text_config"]["model_type"] = "ministral3";
  EXPECT_NE(error_of(ministral).find("text_config: unsupported model_type 'ministral3'"), std::string::npos)
      << error_of(ministral);

  const ModelConfig p = preset_config("mistral-4");
  EXPECT_EQ(p.model_type, "mistral4");
  EXPECT_EQ(p.multimodal, "mistral3");
  EXPECT_FALSE(p.tie_word_embeddings);
  EXPECT_EQ(p.layers, 36);
  EXPECT_EQ(p.experts, 128);
  EXPECT_EQ(p.experts_per_token, 4);
  EXPECT_EQ(p.mla->kv_lora + p.mla->rope, 320);  // the latent cache: 320 values a token and layer
  EXPECT_EQ(p.mla->query_scale_period, 8192);
  EXPECT_EQ(p.max_position, 1048576);
}

// The cache holds the latent once per position and layer — Rope + KvLora values, no head
// dimension — whole on every shard: the footprint says so, and the cache the network holds
// (keys and values one tensor) is that size.
TEST(LatentAttention, TheCacheHoldsTheLatentOncePerPositionOnEveryShard) {
  const ModelConfig c = parse(v3_base());
  for (int64_t shards : {1, 2, 4, 8}) {
    SCOPED_TRACE(shards);
    const Generics g = bind_generics(c, RunOptions{2, 32, shards, 8, std::nullopt});
    const auto specs = layer_states(c, g);
    ASSERT_EQ(specs.size(), 3u);
    for (const auto& s : specs) {
      EXPECT_EQ(s.kind, LayerCacheSpec::Kind::latent);
      EXPECT_EQ(s.values_per_slot(), 4 + 16);
      EXPECT_FALSE(s.sharded);
    }
    const Footprint f = rank_footprint(c, g, DType::bf16);
    EXPECT_EQ(f.kv_per_slot, 3 * (4 + 16) * 2);
    EXPECT_EQ(f.kv_cache, f.kv_per_slot * 2 * 32);
    auto be = make_backend("cpu");
    const KvCache cache(*be, specs, 2, 32, DType::bf16, 2);
    EXPECT_EQ(cache.bytes(), f.kv_cache);
    EXPECT_EQ(cache.snapshot(*be).size(), 3u);  // one tensor a layer
  }
}

// DeepSeek-V3's FP8 kv_b_proj is held dequantized (the absorbed per-head blocks, in T): the
// footprint counts it in T, the other FP8 matrices as stored; q_b_proj and kv_b_proj split by
// heads, kv_a_proj whole on every shard.
TEST(LatentAttention, Fp8KvBProjIsCountedAsHeld) {
  const ModelConfig c = load_hf_config((kGolden / "fp8_deepseek_v3_f32").string());
  const Generics g = bind_generics(c, RunOptions{1, 32, 2, 8, std::nullopt});
  bool seen_kv_b = false;
  for (const ParamSpec& p : parameter_specs(c, g)) {
    if (p.card_name == "layers[1].attention.kv_b_proj.weight") {
      seen_kv_b = true;
      EXPECT_FALSE(p.layout.dense());
      EXPECT_TRUE(p.held_dequantized);
      EXPECT_EQ(p.shard_shape(), Shape({4 * (8 + 6), 16}));  // 4 of 8 heads
      EXPECT_EQ(held_bytes(c, p, DType::f32, DType::f32), 4 * 14 * 16 * 4);
    }
    if (p.card_name == "layers[1].attention.q_b_proj.weight") {
      EXPECT_EQ(p.shard_shape(), Shape({4 * 12, 24}));
      EXPECT_EQ(held_bytes(c, p, DType::f32, DType::f32), p.layout.bytes(p.shard_shape(), DType::f32));
    }
    if (p.card_name == "layers[1].attention.kv_a_proj.weight") EXPECT_EQ(p.split, Split::mirrored);
  }
  EXPECT_TRUE(seen_kv_b);
}

// DeepSeek-V3's multi-token-prediction layer (model.layers.<num_hidden_layers>.*) is skipped
// with one line: the deepseek_v3 fixture read as 2 layers, its third standing for the MTP layer.
TEST(LatentAttention, MultiTokenPredictionLayerIsSkippedWithOneLine) {
  const fs::path golden = kGolden / "deepseek_v3";
  const fs::path d = fresh_dir("deepseek_v3_mtp");
  fs::create_directories(d / "ckpt");
  fs::copy_file(golden / "model.safetensors", d / "ckpt/model.safetensors");
  json c = json::parse(std::ifstream(golden / "config.json"));
  c["num_hidden_layers"] = 2;
  c["num_nextn_predict_layers"] = 1;
  write_text(d / "ckpt/config.json", c.dump());
  write_text(d / "calls.json", R"([{"entry": "forward", "args": {"tokens": [[1, 2, 3]]}}])");
  const auto r = linnet_run(
      {"run", "--checkpoint", (d / "ckpt").string(), "--calls", (d / "calls.json").string(), "--backend", "cpu"}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_NE(r.errors.find("tensor(s) of the multi-token-prediction layer(s) model.layers.2.* skipped"), std::string::npos)
      << r.errors;
  EXPECT_EQ(r.errors.find("not used by the model"), std::string::npos) << r.errors;
}
