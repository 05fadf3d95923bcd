// Hybrid linear-attention models (issue 40): Qwen3.5's text model (architectures/qwen3_5.cpp) —
// its config as transformers' Qwen3_5TextConfig reads it, its recurrent state (a fixed size a
// row, counted by the footprint and held by the cache), every entry on a random model against
// forward, batch invariance, and the one rule its state adds: a row goes on where it stopped or
// starts again at 0. Its numbers against transformers: the fixtures qwen3_5* (tests/
// conformance_test.cpp) and ExactGeneration.Qwen3_5* (the engine, tests/exact_generation_test.cpp).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "architectures/hf_config.h"
#include "checkpoint/safetensors.h"
#include "config_models.h"
#include "core/backend.h"
#include "layers/batch_plan.h"
#include "layers/footprint.h"
#include "layers/kv_cache.h"
#include "layers/model_definition.h"
#include "layers/parameters.h"
#include "model_fixtures.h"
#include "mpi_run.h"
#include "runtime/loader.h"

using namespace linnet;
using namespace linnet::testing;
using nlohmann::json;

namespace {

// Layers linear, full, linear; 4 key heads of 8 over 8 value heads of 8; attention 4 heads over
// 2 KV heads of 16 (rotary 4 of 16).
json qwen3_5() {
  return json::parse(R"({"model_type": "qwen3_5_text", "vocab_size": 97, "hidden_size": 32, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 48, "num_hidden_layers": 3,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "torch_dtype": "float32", "bos_token_id": 1,
    "eos_token_id": 2, "linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 8,
    "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4,
    "layer_types": ["linear_attention", "full_attention", "linear_attention"]})");
}

}  // namespace

// Qwen3_5TextConfig's defaults (Qwen3.5-9B's shapes where the config is silent), its keys, and
// the writer read back.
TEST(Hybrid, Qwen3_5ConfigAsTransformersReadsIt) {
  const json bare = json::parse(R"({"model_type": "qwen3_5_text", "vocab_size": 97, "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48, "num_hidden_layers": 8})");
  const ModelConfig c = parse(bare);
  EXPECT_EQ(c.head_dim(), 256);
  EXPECT_EQ(c.rotary_dim(), 64);  // partial_rotary_factor 0.25
  EXPECT_EQ(c.qk_norm, ModelConfig::QkNorm::per_head);
  EXPECT_TRUE(c.norm_plus_one);
  EXPECT_TRUE(c.attention_output_gate);
  ASSERT_TRUE(c.linear_attention);
  EXPECT_EQ(c.linear_attention->key_heads, 16);
  EXPECT_EQ(c.linear_attention->key_dim, 128);
  EXPECT_EQ(c.linear_attention->value_heads, 32);
  EXPECT_EQ(c.linear_attention->value_dim, 128);
  EXPECT_EQ(c.linear_attention->conv_kernel, 4);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(c.linear_layer(i), (i + 1) % 4 != 0) << i;  // full_attention_interval 4
  EXPECT_FALSE(c.any_sliding());
  EXPECT_FALSE(c.llama_shaped());
  const ModelConfig every_other = parse(with(bare, {{"full_attention_interval", 2}}));
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(every_other.linear_layer(i), i % 2 == 0) << i;
  const ModelConfig listed = parse(qwen3_5());
  EXPECT_TRUE(listed.linear_layer(0));
  EXPECT_FALSE(listed.linear_layer(1));
  EXPECT_TRUE(listed.linear_layer(2));
  // The writer: read back to the same model.
  const ModelConfig back = parse_hf_config(to_hf_config(listed), "written");
  EXPECT_EQ(back.linear_attention->value_heads, 8);
  EXPECT_EQ(back.linear_layer(1), false);
  EXPECT_EQ(back.linear_layer(2), true);
  EXPECT_EQ(back.rotary_dim(), 4);
}

// Qwen3_5MoeTextConfig's defaults: every layer's MLP 256 experts of 512, top 8, renormalised, a
// shared expert of 512 with its gate; no dense MLP (no intermediate_size). The multimodal
// wrappers (Qwen3_5ForConditionalGeneration and its MoE twin) are read as their text model, with
// the wrapper's tie_word_embeddings (default false) and dtype.
TEST(Hybrid, Qwen3_5MoeAndTheMultimodalWrappersAsTransformersReadsThem) {
  const json moe = json::parse(R"({"model_type": "qwen3_5_moe_text", "vocab_size": 97, "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4})");
  const ModelConfig m = parse(moe);
  EXPECT_EQ(m.experts, 256);
  EXPECT_EQ(m.experts_per_token, 8);
  EXPECT_EQ(m.expert_inner, 512);
  EXPECT_TRUE(m.norm_topk_prob);
  EXPECT_EQ(m.shared_expert_inner, 512);
  EXPECT_TRUE(m.shared_expert_gate);
  EXPECT_EQ(m.inner, 0);
  EXPECT_FALSE(m.any_dense_mlp());
  EXPECT_TRUE(m.linear_layer(0));
  EXPECT_FALSE(m.linear_layer(3));
  const ModelConfig back = parse_hf_config(to_hf_config(m), "written");
  EXPECT_EQ(back.experts, 256);
  EXPECT_EQ(back.shared_expert_inner, 512);
  for (const auto& [wrapper, text] : {std::pair{"qwen3_5", qwen3_5()}, {"qwen3_5_moe", moe}}) {
    SCOPED_TRACE(wrapper);
    json t = text;
    t.erase("torch_dtype");
    const json w = {{"model_type", wrapper}, {"text_config", t}, {"vision_config", {{"depth", 1}}},
                    {"dtype", "bfloat16"}};
    const ModelConfig c = parse(w);
    EXPECT_EQ(c.model_type, text["model_type"]);
    EXPECT_EQ(c.multimodal, wrapper);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_EQ(c.dtype, DType::bf16);
    json untyped = w;
    untyped["text_config"].erase("model_type");  // the wrapper's default text model
    EXPECT_EQ(parse(untyped).model_type, std::string(wrapper) + "_text");
  }
}

// Qwen3NextConfig's defaults (Qwen3-Next-80B-A3B's shapes): 512 experts of 512, top 10,
// norm_topk_prob true, a gated shared expert of 512, every layer sparse unless mlp_only_layers
// says; its DeltaNet projections grouped per key head, read as strided parts of in_proj_qkvz /
// in_proj_ba (a shard's rows whole key heads).
TEST(Hybrid, Qwen3NextConfigAndItsGroupedProjections) {
  const json j = json::parse(R"({"model_type": "qwen3_next", "vocab_size": 97, "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48, "num_hidden_layers": 4,
    "mlp_only_layers": [3]})");
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.experts, 512);
  EXPECT_EQ(c.experts_per_token, 10);
  EXPECT_EQ(c.expert_inner, 512);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.shared_expert_inner, 512);
  EXPECT_TRUE(c.shared_expert_gate);
  EXPECT_TRUE(c.sparse_layer(0));
  EXPECT_FALSE(c.sparse_layer(3));
  EXPECT_TRUE(c.linear_attention->grouped_projections);
  EXPECT_EQ(c.head_dim(), 256);
  EXPECT_EQ(c.rotary_dim(), 64);
  const Generics g = bind_generics(c, RunOptions{1, 32, 4, 8, std::nullopt});
  // Shard 1 of 4: key heads 4–7 (of 16, dk 128), value heads 8–15 (g 2, dv 128); a key head's
  // block of in_proj_qkvz is 2·128 + 2·256 = 768 rows.
  int checked = 0;
  for (const ParamSpec& p : parameter_specs(c, g)) {
    if (p.card_name == "layers[0].linear_attention.v_proj.weight") {
      ++checked;
      EXPECT_EQ(p.hf_name, "model.layers.0.linear_attn.in_proj_qkvz.weight");
      const auto [b, e] = p.shard_range(1);
      EXPECT_EQ(p.stored_row_ranges(b, e),
                (std::vector<std::pair<int64_t, int64_t>>{{4 * 768 + 256, 4 * 768 + 512}, {5 * 768 + 256, 5 * 768 + 512},
                                                          {6 * 768 + 256, 6 * 768 + 512}, {7 * 768 + 256, 7 * 768 + 512}}));
    }
    if (p.card_name == "layers[0].linear_attention.a_proj.weight") {
      ++checked;
      const auto [b, e] = p.shard_range(1);  // in_proj_ba: per key head [b b | a a]
      EXPECT_EQ(p.stored_row_ranges(b, e),
                (std::vector<std::pair<int64_t, int64_t>>{{4 * 4 + 2, 4 * 4 + 4}, {5 * 4 + 2, 5 * 4 + 4},
                                                          {6 * 4 + 2, 6 * 4 + 4}, {7 * 4 + 2, 7 * 4 + 4}}));
    }
  }
  EXPECT_EQ(checked, 2) << "the parameter table lacks layer 0's v_proj or a_proj";
}

// Qwen3-Next in fine-grained FP8 (issue 40; the fp8_qwen3_next_f32 fixture runs it): a strided
// part is read quantized where its blocks of rows hold whole blocks of the format — in_proj_qkvz's
// q, k (dk rows) and v, z (2·dv) in blocks of 4; in_proj_ba's b and a (2 rows a key head) do not,
// and are refused by name unless left unconverted (as Qwen3-Next's FP8 checkpoints leave them).
TEST(Hybrid, Qwen3NextQuantizedStridedPartsHoldWholeBlocks) {
  auto refusal = [](const json& quant) {
    json j = json::parse(R"({"model_type": "qwen3_next", "vocab_size": 97, "hidden_size": 64,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48, "num_hidden_layers": 2,
      "linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
      "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 16,
      "layer_types": ["linear_attention", "full_attention"]})");
    j["quantization_config"] = quant;
    const ModelConfig c = parse(j);
    const Generics g = bind_generics(c, RunOptions{1, 32, 2, 8, std::nullopt});
    int strided = 0;
    try {
      for (const ParamSpec& p : parameter_specs(c, g)) {
        strided += p.row_block > 0 && !p.layout.dense();
        p.check_blocks(2);
      }
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return str("(accepted; ", strided, " quantized strided parts)");
  };
  const json fp8 = {{"quant_method", "fp8"}, {"weight_block_size", {4, 4}}, {"activation_scheme", "dynamic"}};
  EXPECT_EQ(refusal(fp8), "model.layers.0.linear_attn.in_proj_ba.weight: a strided part of it (blocks of 2 rows every 4 "
                          "from row 0) stored fp8 4×4: its blocks of rows do not hold whole blocks of the format (or the "
                          "format stores it transposed)");
  json kept = fp8;
  kept["modules_to_not_convert"] = {"lm_head", "in_proj_ba"};
  EXPECT_EQ(refusal(kept), "(accepted; 4 quantized strided parts)");  // in_proj_qkvz's q, k, v, z
}

TEST(Hybrid, Qwen3_5RefusalsNameTheRule) {
  EXPECT_EQ(error_of(with(qwen3_5(), {{"linear_num_value_heads", 6}})),
            "cfg.json: linear_num_value_heads 6 is not a multiple of linear_num_key_heads 4 (each key head serves "
            "linear_num_value_heads / linear_num_key_heads value heads)");
  EXPECT_EQ(error_of(with(qwen3_5(), {{"layer_types", {"linear_attention", "sliding_attention", "full_attention"}}})),
            "cfg.json: layer_types[1] 'sliding_attention' is not supported (full_attention, linear_attention)");
  // A llama's layer_types cannot name linear attention.
  EXPECT_EQ(error_of(with(qwen3_5(), {{"model_type", "qwen3"}})),
            "cfg.json: layer_types[0] 'linear_attention' is not supported (full_attention, sliding_attention)");
  const ModelConfig c = parse(with(qwen3_5(), {{"num_attention_heads", 8}}));  // attention splits over 8
  try {
    bind_generics(c, RunOptions{1, 32, 8, 8, std::nullopt});
    ADD_FAILURE() << "Shards 8 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "LinearKeyHeads=4 (linear_num_key_heads) does not divide by Shards=8 (a Gated "
                                     "DeltaNet layer is split by key head, each with its value heads)");
  }
}

// The linear layers keep a state of a fixed size a row — the conv's last K − 1 inputs of its
// q|k|v channels and the delta state, f32, split by heads — and no keys or values; the full
// layer keeps its KV heads. The footprint counts what the cache holds.
TEST(Hybrid, TheRecurrentStateIsAFixedSizeARowOnEveryShard) {
  const ModelConfig c = parse(qwen3_5());
  for (int64_t shards : {1, 2, 4}) {
    SCOPED_TRACE(shards);
    const Generics g = bind_generics(c, RunOptions{3, 32, shards, 8, std::nullopt});
    const auto specs = layer_states(c, g);
    ASSERT_EQ(specs.size(), 3u);
    const int64_t channels = (2 * 4 * 8 + 8 * 8) / shards, state = channels * 3 + 8 / shards * 8 * 8;
    for (size_t i : {0u, 2u}) {
      EXPECT_EQ(specs[i].kind, LayerCacheSpec::Kind::recurrent);
      EXPECT_EQ(specs[i].values_per_slot(), 0);
      EXPECT_EQ(specs[i].state_values_per_row(), state);
    }
    EXPECT_EQ(specs[1].kind, LayerCacheSpec::Kind::heads);
    const Footprint f = rank_footprint(c, g, DType::bf16);
    EXPECT_EQ(f.state_per_row, 2 * state * 4);  // f32 whatever the cache's dtype
    EXPECT_EQ(g.state_snapshots, 3);  // default: Batch
    EXPECT_EQ(f.state, f.state_per_row * (3 + 3));
    EXPECT_EQ(f.kv_per_slot, specs[1].values_per_slot() * 2);
    auto be = make_backend("cpu");
    const KvCache cache(*be, specs, 3, 32, DType::bf16, g.state_rows());
    EXPECT_EQ(cache.bytes(), f.kv_cache + f.state);
  }
}

// Through every way into the cache, a sequence gets forward's logits (the entries that write a
// row run its tokens through the row's state).
TEST(Hybrid, EveryEntryAgreesWithForward) { expect_every_entry_agrees_with_forward(qwen3_5()); }

// A sequence's logits and log-probs are the same bits alone and among others.
TEST(Hybrid, BatchInvariantBitForBit) { expect_batch_invariant_bit_for_bit(qwen3_5()); }

// The state holds a row's sequence up to where it stopped, not every position: a call that
// goes on elsewhere (overwriting earlier positions, skipping some) is refused before anything
// runs, naming the row and positions, and every row's state is left as it was; going on at the
// next position, or starting again at 0, runs.
// Snapshots of the state (the engine's prefix sharing, issue 40): a step keeps row 0's state
// after position 7 in snapshot 0 while row 0 goes on to 11; a later step restores it into row 1,
// which reads the same pages and computes positions 8..11 only — and ends with row 0's state,
// bit for bit. A restore from a snapshot that holds nothing, or that stopped elsewhere, is
// refused before anything runs, naming the snapshot, row and positions, every state unchanged.
// Qwen3.5's checkpoints ship linear_attn.A_log and the gated norm's weight in F32 beside a bf16
// torch_dtype (vLLM and SGLang keep them so): a vector stored in f32 loads as stored. The bf16
// fixture with those vectors widened to F32 (exactly) gives the same logits, bit for bit; a
// matrix stored in F32 is still refused, naming file, tensor and both dtypes.
TEST(Hybrid, VectorsStoredInF32BesideBf16LoadAsStored) {
  const std::filesystem::path golden = std::filesystem::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden/qwen3_5_bf16";
  const std::filesystem::path d = fresh_dir("hybrid_f32_vectors");
  auto rewrite = [&](const std::function<bool(const std::string&, const Tensor&)>& widen) {
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    for (const char* f : {"config.json", "generation_config.json"}) std::filesystem::copy_file(golden / f, d / f);
    SafetensorsFile in((golden / "model.safetensors").string());
    std::vector<std::pair<std::string, Tensor>> out;
    int widened = 0;
    for (const std::string& name : in.names()) {
      Tensor t = in.read(name);
      if (widen(name, t)) t = t.to(DType::f32), ++widened;
      out.emplace_back(name, t);
    }
    save_safetensors((d / "model.safetensors").string(), out);
    return widened;
  };
  auto logits = [](const std::filesystem::path& dir) {
    auto be = make_cpu_backend();
    SingleCommunicator comm;
    RunOptions o;
    o.max_seq = 32;
    LoadedModel m = load_model(dir.string(), o, *be, comm);
    return m.model->forward(Tensor::from_ints({1, 12}, random_ids(12, 3)));
  };
  const int widened = rewrite([](const std::string& name, const Tensor& t) {
    return t.rank() == 1 && (name.find("A_log") != std::string::npos || name.find("linear_attn.norm") != std::string::npos);
  });
  EXPECT_GE(widened, 2);
  EXPECT_TRUE(same_bytes(logits(d), logits(golden)));
  rewrite([](const std::string& name, const Tensor&) { return name.find("linear_attn.out_proj.weight") != std::string::npos; });
  try {
    logits(d);
    ADD_FAILURE() << "a matrix stored in F32 beside bf16 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_attn.out_proj.weight' is stored as f32, but config.json's torch_dtype says bf16"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(d);
}

// Qwen3.5's and Qwen3-Next's checkpoints ship a multi-token-prediction module (mtp.*): skipped
// with one line, not reported as tensors the model does not use.
TEST(Hybrid, TheMultiTokenPredictionModuleIsSkippedWithOneLine) {
  const std::filesystem::path golden = std::filesystem::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden/qwen3_5";
  const std::filesystem::path d = fresh_dir("hybrid_mtp");
  std::filesystem::create_directories(d / "ckpt");
  std::filesystem::copy_file(golden / "config.json", d / "ckpt/config.json");
  SafetensorsFile in((golden / "model.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> out;
  for (const std::string& name : in.names()) out.emplace_back(name, in.read(name));
  out.emplace_back("mtp.fc.weight", Tensor::zeros({64, 128}, DType::f32));
  out.emplace_back("mtp.layers.0.mlp.up_proj.weight", Tensor::zeros({96, 64}, DType::f32));
  save_safetensors((d / "ckpt/model.safetensors").string(), out);
  std::ofstream(d / "calls.json") << R"([{"entry": "forward", "args": {"tokens": [[1, 2, 3]]}}])";
  const auto r = linnet::testing::linnet_run(
      {"run", "--checkpoint", (d / "ckpt").string(), "--calls", (d / "calls.json").string(), "--backend", "cpu"}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_NE(r.errors.find("2 tensor(s) of the multi-token-prediction module mtp.* skipped (speculative decoding is not "
                          "implemented)"),
            std::string::npos)
      << r.errors;
  EXPECT_EQ(r.errors.find("not used by the model"), std::string::npos) << r.errors;
  std::filesystem::remove_all(d);
}

TEST(Hybrid, ASnapshotRestoredGoesOnAsTheRowItWasKeptFrom) {
  ConfigModel m(qwen3_5(), DType::f32, 2);  // MaxSeq 32, pages of 8; Batch 2 → 2 snapshots
  ASSERT_EQ(m.g.state_snapshots, 2);
  const auto a = random_ids(12, 7);
  auto step = [&](int64_t begin, int32_t state_row, std::vector<TokenPlan::StateRestore> restores, int keep_after) {
    BatchPlan plan;
    plan.rows = 1;
    plan.pages = 4;
    plan.table = {0, 1, 2, 3};  // row 0's pages (the identity layout), read by either state row
    plan.sample = {-1};
    plan.choices.resize(1);
    for (int64_t i = begin; i < 12; ++i)
      plan.tokens.add(static_cast<int32_t>(a[static_cast<size_t>(i)]), static_cast<int32_t>(i), -1, 0,
                      static_cast<int32_t>(i), state_row);
    plan.tokens.state_restores = std::move(restores);
    if (keep_after >= 0) {
      plan.tokens.state_keep.assign(plan.tokens.size(), -1);
      plan.tokens.state_keep[static_cast<size_t>(keep_after - begin)] = 0;
    }
    m->run_batch(plan);
  };
  step(0, 0, {}, 7);  // row 0: positions 0..11, its state after 7 kept
  const auto before = m->cache_snapshot();
  auto refused = [&](std::vector<TokenPlan::StateRestore> restores, const std::string& want) {
    try {
      step(8, 1, std::move(restores), -1);
      ADD_FAILURE() << "accepted: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    const auto after = m->cache_snapshot();
    for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(same_bytes(after[i], before[i])) << "state " << i << " changed";
  };
  refused({{1, 1, 8}}, "state snapshot 1 holds nothing; restored into row 1 to go on at position 8 it would give that row "
                       "another sequence's state");
  refused({{0, 1, 9}}, "state snapshot 0 holds a sequence up to position 7; restored into row 1 to go on at position 9");
  refused({}, "row 1 at position 8: this model's Gated DeltaNet layers keep one running state a row");
  step(8, 1, {{0, 1, 8}}, -1);  // row 1: restored at 8, positions 8..11
  int recurrent = 0;
  for (const Tensor& t : m->cache_snapshot()) {
    if (t.dim(0) != 4) continue;  // the recurrent tensors: Batch 2 rows + 2 snapshots
    ++recurrent;
    EXPECT_TRUE(same_bytes(t.rows(1, 2), t.rows(0, 1))) << "row 1's state is not row 0's";
    EXPECT_FALSE(same_bytes(t.rows(2, 3), t.rows(0, 1))) << "the snapshot is the state after position 7, not 11";
  }
  EXPECT_GT(recurrent, 0);
}

// The delta rule's aligned chunks (positions [64c, 64c + 64) of one call) through the whole model:
// two rows of 150 tokens, each alone in one call, or cut at 64 and 128 with the other row's tokens
// beside them in every call — the same bits in every state and cache tensor; cut inside a chunk
// (at 40), that chunk runs token by token: within float rounding, not the same bits.
TEST(Hybrid, AnAlignedChunkGivesTheSameBitsWhereverTheCallsCutAroundIt) {
  const int64_t n = 150, pages = 19;  // pages of 8
  const auto a = random_ids(n, 17), b = random_ids(n, 18);
  struct Piece {
    int32_t row;
    int64_t begin, end;
  };
  auto run = [&](const std::vector<std::vector<Piece>>& calls) {
    ConfigModel m(qwen3_5(), DType::f32, 2, 5, 160);
    for (const auto& call : calls) {
      BatchPlan plan;
      plan.rows = 2;
      plan.pages = pages;
      for (int32_t p = 0; p < 2 * pages; ++p) plan.table.push_back(p);  // row r: pages r·19 …
      plan.sample = {-1, -1};
      plan.choices.resize(2);
      for (const Piece& piece : call)
        for (int64_t i = piece.begin; i < piece.end; ++i)
          plan.tokens.add(static_cast<int32_t>((piece.row == 0 ? a : b)[static_cast<size_t>(i)]), static_cast<int32_t>(i),
                          -1, piece.row, static_cast<int32_t>(piece.row * pages * 8 + i));
      m->run_batch(plan);
    }
    return m->cache_snapshot();
  };
  const auto alone = run({{{0, 0, n}}, {{1, 0, n}}});
  const auto together = run({{{0, 0, 64}, {1, 0, 128}}, {{1, 128, n}, {0, 64, 128}}, {{0, 128, n}}});
  const auto inside = run({{{0, 0, 40}, {1, 0, n}}, {{0, 40, n}}});
  ASSERT_EQ(together.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    EXPECT_TRUE(same_bytes(together[i], alone[i])) << "cache tensor " << i;
  }
  bool differs = false;
  for (size_t i = 0; i < alone.size(); ++i) {
    const auto want = alone[i].to_floats(), got = inside[i].to_floats();
    double err = 0, scale = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      err = std::max(err, std::abs(static_cast<double>(got[k]) - want[k]));
      scale = std::max(scale, std::abs(static_cast<double>(want[k])));
    }
    EXPECT_LT(err, 1e-5 * scale) << "cache tensor " << i;
    differs |= !same_bytes(inside[i], alone[i]);
  }
  EXPECT_TRUE(differs) << "the chunk cut at 40 ran by the recurrent form";
}

TEST(Hybrid, ARowGoesOnWhereItStoppedOrStartsAgain) {
  ConfigModel m(qwen3_5(), DType::f32, 2);
  const auto a = random_ids(12, 7), b = random_ids(12, 8);
  std::vector<int64_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  std::vector<int64_t> head(a.begin(), a.begin() + 10);
  head.insert(head.end(), b.begin(), b.begin() + 10);
  m->prefill(ids({2, 10}, head), 0);
  const auto before = m->cache_snapshot();
  auto refused = [&](auto call, const std::string& want) {
    try {
      call();
      ADD_FAILURE() << "accepted: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    const auto after = m->cache_snapshot();
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(same_bytes(after[i], before[i])) << "state " << i << " changed";
  };
  refused([&] { m->decode(column({a[5], b[5]}), 5); },
          "row 0 at position 5: this model's Gated DeltaNet layers keep one running state a row (not a cache of every "
          "position), which holds that row's sequence up to position 9; a call may go on at position 10 or start the "
          "row again at 0");
  refused([&] { m->decode(column({a[11], b[11]}), 11); }, "go on at position 10");
  refused([&] { m->decode_rows(column({a[10], b[10]}), i32({10, 4})); }, "row 1 at position 4");
  {  // a row never filled cannot go on anywhere but 0
    ConfigModel fresh(qwen3_5(), DType::f32, 2);
    try {
      fresh->decode(column({a[3], b[3]}), 3);
      ADD_FAILURE() << "a row never filled went on at position 3";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("row 0 at position 3: this model's Gated DeltaNet layers keep one running "
                                           "state a row (not a cache of every position), which holds nothing yet; a "
                                           "call may start the row at 0"),
                std::string::npos)
          << e.what();
    }
  }
  // Going on: the next position on both rows, then row 1 alone starts again.
  const Tensor next = m->decode(column({a[10], b[10]}), 10);
  ConfigModel ref(qwen3_5(), DType::f32, 2);
  const Tensor fwd = ref->forward(ids({2, 12}, ab));  // [2, 12, V]
  EXPECT_LT(rel_diff(row(next, 0), fwd.reshape({24, 97}).rows(10, 11).reshape({97})), 2e-5);
  EXPECT_LT(rel_diff(row(next, 1), fwd.reshape({24, 97}).rows(22, 23).reshape({97})), 2e-5);
  const Tensor again = m->prefill_slots(ids({1, 3}, {b[0], b[1], b[2]}), i32({1}), i32({3}));
  EXPECT_LT(rel_diff(row(again, 0), fwd.reshape({24, 97}).rows(14, 15).reshape({97})), 2e-5);
}
