// Pipeline stages (issue 41): the job's layout as replicas × stages × shards
// (parallel/world_config.h), each stage's contiguous layers, what a stage's rank holds
// (layers/footprint.h), `linnet inspect --pp`, and the layouts refused before anything loads.
// (Their results equal one stage's: TensorParallel.PipelineStagesEveryEntryTheSameBitsAsOneStage.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "architectures/presets.h"
#include "command_checks.h"
#include "core/error.h"
#include "layers/footprint.h"
#include "layers/model_definition.h"
#include "model_fixtures.h"
#include "mpi_run.h"
#include "parallel/world_config.h"
#include "runtime/write_checkpoint.h"

using namespace linnet;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Qwen3-Next-80B-A3B at Shards 4, Batch 8, MaxSeq 4096 (inspect's plan in these tests).
Generics qwen3_next_plan(const ModelConfig& c) {
  RunOptions o;
  o.batch = 8;
  o.max_seq = 4096;
  o.shards = 4;
  return bind_generics(c, o);
}

}  // namespace

// Shard innermost, then stage, then replica (Megatron's and vLLM's order).
TEST(Pipeline, TheWorldIsReplicasTimesStagesTimesShards) {
  const WorldConfig w = WorldConfig::make(8, 2, 2);
  EXPECT_EQ(w.replicas(), 2);
  EXPECT_EQ(w.describe(), "8 ranks = 2 replicas × 2 stages × 2 shards (rank = (replica · 2 + stage) · 2 + shard)");
  const int want[8][3] = {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1}, {1, 0, 0}, {1, 0, 1}, {1, 1, 0}, {1, 1, 1}};
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(w.replica_of(r), want[r][0]) << r;
    EXPECT_EQ(w.stage_of(r), want[r][1]) << r;
    EXPECT_EQ(w.shard_of(r), want[r][2]) << r;
    EXPECT_EQ(w.rank_of(want[r][0], want[r][1], want[r][2]), r);
  }
  // --tp 0: a stage's share of a replica's ranks, one replica.
  const WorldConfig all = WorldConfig::make(8, 0, 4);
  EXPECT_EQ(all.tp, 2);
  EXPECT_EQ(all.replicas(), 1);
  EXPECT_EQ(WorldConfig::make(4, 1, 4).describe(), "4 ranks = 1 replica × 4 stages × 1 shard (rank = (replica · 4 + stage) · 1 + shard)");
  EXPECT_EQ(error_of([] { WorldConfig::make(8, 2, 3); }),
            "--pp 3 with --tp 2: 3 stages × 2 shards = 6 ranks a replica, which does not divide the 8 ranks (the world is "
            "replicas × stages × shards)");
  EXPECT_EQ(error_of([] { WorldConfig::make(6, 0, 4); }),
            "--pp 4 does not divide the 6 ranks: each of a replica's stages is the same number of ranks (the world is "
            "replicas × stages × shards)");
  EXPECT_EQ(error_of([] { WorldConfig::make(1, 0, 2); }),
            "--pp 2 needs at least 2 ranks (a stage a rank), but this job has 1 (start it with mpirun or srun)");
  EXPECT_EQ(error_of([] { WorldConfig::make(4, 2, 4); }), "--pp 4 with --tp 2 needs 4 × 2 = 8 ranks, but this job has 4");
  EXPECT_EQ(error_of([] { WorldConfig::make(4, 2, 0); }), "--pp must be a positive number of pipeline stages, got 0");
}

// Even by default, the layers left over going to the stages just before the last (vLLM's
// get_pp_indices); --pp-layers as given; the rules named.
TEST(Pipeline, StagesHoldContiguousLayersEvenlyOrAsGiven) {
  auto counts = [](const std::vector<StageLayers>& s) {
    std::vector<int64_t> n;
    int64_t at = 0;
    for (const StageLayers& l : s) {
      EXPECT_EQ(l.begin, at);
      at = l.end;
      n.push_back(l.count());
    }
    return n;
  };
  EXPECT_EQ(counts(stage_layers(32, 4)), (std::vector<int64_t>{8, 8, 8, 8}));
  EXPECT_EQ(counts(stage_layers(30, 4)), (std::vector<int64_t>{7, 8, 8, 7}));
  EXPECT_EQ(counts(stage_layers(61, 4)), (std::vector<int64_t>{15, 15, 16, 15}));
  EXPECT_EQ(counts(stage_layers(5, 2)), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(counts(stage_layers(126, 1)), (std::vector<int64_t>{126}));
  EXPECT_EQ(counts(stage_layers(34, 3, {12, 11, 11})), (std::vector<int64_t>{12, 11, 11}));
  EXPECT_EQ(parse_stage_counts("12,11,11"), (std::vector<int64_t>{12, 11, 11}));
  EXPECT_EQ(error_of([] { stage_layers(4, 5); }),
            "--pp 5: more pipeline stages than the model's 4 layers (each stage holds at least one)");
  EXPECT_EQ(error_of([] { stage_layers(34, 3, {12, 22}); }), "--pp-layers names 2 stages' layers, but --pp is 3");
  EXPECT_EQ(error_of([] { stage_layers(34, 3, {12, 11, 10}); }),
            "--pp-layers sums to 33 layers, but the model has 34 (the stages hold every layer once)");
  EXPECT_EQ(error_of([] { stage_layers(34, 3, {34, 0, 0}); }),
            "--pp-layers: stage 1 holds 0 layers (each stage holds at least one)");
  EXPECT_EQ(error_of([] { parse_stage_counts("12,,11"); }),
            "--pp-layers '12,,11': entry 1 ('') is not a whole number of layers");
  EXPECT_EQ(error_of([] { parse_stage_counts("12,11x"); }),
            "--pp-layers '12,11x': entry 1 ('11x') is not a whole number of layers");
}

// A stage's rank holds its layers' parameters and cache, the embedding on the first stage, the
// final norm and lm_head on the last: the stages' parameters add up to one rank's at --pp 1 (a
// tied lm_head's embedding once more: the last stage loads it too), their caches exactly.
TEST(Pipeline, EachStageHoldsItsLayersAndTheEndsTheirParts) {
  for (const char* preset : {"qwen3-next-80b-a3b", "llama-3.2-1b"}) {
    SCOPED_TRACE(preset);
    const ModelConfig c = preset_or_config(preset);
    RunOptions o;
    o.batch = 4;
    o.max_seq = 1024;
    o.shards = 2;
    const Generics g = bind_generics(c, o);
    const Footprint whole = rank_footprint(c, g, DType::bf16, DType::bf16);
    const std::vector<StageLayers> stages = stage_layers(g.layers, 3);
    Footprint sum;
    int64_t embedding = 0;
    for (const ParamSpec& p : parameter_specs(c, g))
      if (p.card_name == "embedding.weight") embedding = held_bytes(c, p, DType::bf16, DType::bf16);
    for (size_t s = 0; s < stages.size(); ++s) {
      const StageShare share{stages[s].begin, stages[s].end, s == 0, s + 1 == stages.size()};
      const Footprint f = rank_footprint(c, g, DType::bf16, DType::bf16, share);
      sum.parameters += f.parameters;
      sum.kv_cache += f.kv_cache;
      sum.state += f.state;
      EXPECT_LT(f.total(), whole.total()) << "stage " << s;
    }
    EXPECT_EQ(sum.parameters, whole.parameters + (c.tie_word_embeddings ? embedding : 0));
    EXPECT_EQ(sum.kv_cache, whole.kv_cache);
    EXPECT_EQ(sum.state, whole.state);
    if (std::string(preset) == "llama-3.2-1b") {
      EXPECT_TRUE(c.tie_word_embeddings);  // (Llama 3.2's lm_head is tied)
    }
  }
}

// The memory check before loading counts a rank's stage only, and names the stage that does not fit.
TEST(Pipeline, TheMemoryCheckCountsAStagesShareAndNamesIt) {
  const ModelConfig c = preset_or_config("qwen3-next-80b-a3b");
  const Generics g = qwen3_next_plan(c);
  const std::vector<StageLayers> stages = stage_layers(g.layers, 4);
  StagePlace last{StageShare{stages[3].begin, stages[3].end, false, true}, nullptr, 3, 4};
  const Footprint whole = rank_footprint(c, g, DType::bf16, DType::bf16);
  const Footprint stage = rank_footprint(c, g, DType::bf16, DType::bf16, last.share);
  // Room for a stage's share (with the tenth kept back), not for the whole model's.
  const int64_t room = stage.total() / 9 * 10 + (1 << 20);
  ASSERT_LT(room / 10 * 9, whole.total());
  check_fits(c, g, DType::bf16, DType::bf16, room, 1, false, "test device", last);
  const std::string e = error_of([&] { check_fits(c, g, DType::bf16, DType::bf16, room / 2, 1, false, "test device", last); });
  EXPECT_EQ(e.rfind("pipeline stage 3 of 4 (layers 36–47): this rank needs ", 0), 0u) << e;
  EXPECT_THROW(check_fits(c, g, DType::bf16, DType::bf16, room, 1, false, "test device"), Error);  // the whole model
}

// `linnet inspect --pp` prints each stage's layers and per-rank bytes; the layouts a model cannot
// have are refused by name.
TEST(Pipeline, InspectPrintsEachStagesLayersAndBytes) {
  const auto r = linnet::testing::linnet_run(
      {"inspect", "--checkpoint", "qwen3-next-80b-a3b", "--shards", "4", "--batch", "8", "--max-seq", "4096", "--backend",
       "cuda", "--pp", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  const ModelConfig c = preset_or_config("qwen3-next-80b-a3b");
  const Generics g = qwen3_next_plan(c);
  const std::vector<StageLayers> stages = stage_layers(g.layers, 4);
  for (size_t s = 0; s < stages.size(); ++s) {
    const Footprint f = rank_footprint(c, g, DType::bf16, DType::bf16,
                                       StageShare{stages[s].begin, stages[s].end, s == 0, s + 1 == stages.size()});
    const std::string row = str(s, "\t", stages[s].begin, "–", stages[s].end - 1, " (", stages[s].count(), ")\t",
                                s == 0 ? "embedding" : s == 3 ? "norm, lm_head" : "—", "\t", f.parameters, " (");
    EXPECT_NE(r.output.find(row), std::string::npos) << row << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("0\t0–11 (12)\tembedding\t"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3\t36–47 (12)\tnorm, lm_head\t"), std::string::npos) << r.output;
  for (const auto& [args, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--pp", "49"}, "--pp 49: more pipeline stages than the model's 48 layers"},
           {{"--pp", "2", "--pp-layers", "24,23"}, "--pp-layers sums to 47 layers, but the model has 48"},
           {{"--pp", "3", "--pp-layers", "24,24"}, "--pp-layers names 2 stages' layers, but --pp is 3"}}) {
    std::vector<std::string> a = {"inspect", "--checkpoint", "qwen3-next-80b-a3b"};
    a.insert(a.end(), args.begin(), args.end());
    const auto bad = linnet::testing::linnet_run(a);
    EXPECT_NE(bad.exit_code, 0);
    EXPECT_NE(bad.errors.find(want), std::string::npos) << bad.errors;
  }
}

// docs/cluster.md's plans for two nodes as two stages are inspect's figures.
TEST(Pipeline, ClusterPlansInDocsAreInspectsFigures) {
  std::ifstream f(std::string(LINNET_SOURCE_DIR) + "/docs/cluster.md");
  const std::string docs((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const char* preset : {"llama-3.1-405b", "deepseek-v3"}) {
    SCOPED_TRACE(preset);
    const auto r = linnet::testing::linnet_run({"inspect", "--checkpoint", preset, "--shards", "8", "--pp", "2", "--batch",
                                                "64", "--max-seq", "8192", "--backend", "cuda"});
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    // Each stage's "(X GiB)" parameters, cache and total, as the docs' row writes them.
    for (const char* stage : {"\n0\t", "\n1\t"}) {
      const size_t at = r.output.find(stage);
      ASSERT_NE(at, std::string::npos) << r.output;
      const std::string row = r.output.substr(at + 1, r.output.find('\n', at + 1) - at - 1);
      std::vector<std::string> gib;
      for (size_t p = 0; (p = row.find('(', p)) != std::string::npos; ++p)
        if (const size_t q = row.find(" GiB)", p); q != std::string::npos && q - p < 12) gib.push_back(row.substr(p + 1, q - p - 1));
      ASSERT_EQ(gib.size(), 3u) << row;  // parameters, cache, total (the state is 0 B)
      EXPECT_NE(docs.find(gib[0] + " GiB + "), std::string::npos) << row;
      EXPECT_NE(docs.find(gib[1] + " GiB = " + gib[2] + " GiB"), std::string::npos) << row;
    }
  }
}

// Under mpirun every rank refuses a layout that cannot be, naming the rule, before loading
// anything, and no rank waits for another.
TEST(Pipeline, LayoutsAreRefusedOnEveryRankBeforeLoading) {
  const fs::path d = linnet::testing::fresh_dir("pipeline_refusals");
  write_random_checkpoint(linnet::testing::tiny_config(), (d / "ckpt").string(), DType::f32, 1);
  for (const auto& [args, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--pp", "3", "--tp", "1"}, "--pp 3 with --tp 1: 3 stages × 1 shard = 3 ranks a replica, which does not "
                                        "divide the 4 ranks"},
           {{"--pp", "3", "--tp", "2"}, "--pp 3 with --tp 2 needs 3 × 2 = 6 ranks, but this job has 4"},
           {{"--pp", "2", "--pp-layers", "1,2"}, "--pp-layers sums to 3 layers, but the model has 2"},
           {{"--pp", "3"}, "--pp 3 does not divide the 4 ranks"}}) {
    std::vector<std::string> a = {"generate", "--checkpoint", (d / "ckpt").string(), "--prompts", (d / "none.jsonl").string(),
                                  "--output", (d / "out.jsonl").string(), "--backend", "cpu"};
    a.insert(a.end(), args.begin(), args.end());
    const auto r = linnet::testing::mpi_run(4, LINNET_BINARY, a, 60);
    if (r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
    EXPECT_FALSE(r.timed_out) << r.output;
    EXPECT_NE(r.exit_code, 0);
    EXPECT_LT(r.seconds, 20);
    size_t ranks = 0;
    for (size_t at = 0; (at = r.output.find(want, at)) != std::string::npos; ++at) ++ranks;
    EXPECT_EQ(ranks, 4u) << "every rank names the rule:\n" << r.output;
    EXPECT_EQ(r.output.find("weights loaded"), std::string::npos) << r.output;
  }
  fs::remove_all(d);
}

// generate, eval and serve through stages, on a hybrid (Qwen3.5: its Gated DeltaNet states live on
// the stages that run its linear layers): one stage's tokens at --pp 2, --pp 4 and --pp 2 × --tp 2,
// and at --batch 4 (four rows a step: two micro-batches in flight); eval's numbers, and serve
// answering as generate does.
TEST(Pipeline, GenerateEvalAndServeAnswerAsOneStage) {
  const fs::path ckpt = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval/model_qwen3_5";
  linnet::testing::expect_generate_and_eval_agree(
      ckpt, "pp_qwen3_5",
      {{2, {"--pp", "2"}}, {4, {"--pp", "4"}}, {4, {"--pp", "2", "--tp", "2"}}, {2, {"--pp", "2", "--batch", "4"}}},
      {{4, {"--pp", "4"}}, {4, {"--pp", "2", "--tp", "2"}}});
  linnet::testing::expect_serve_answers_as_generate(ckpt, "pp_qwen3_5", {2, {"--pp", "2"}});
}

// --resume under stages: a run that stopped after some lines goes on with the others, and the
// file is the uninterrupted one-stage run's, byte for byte.
TEST(Pipeline, ResumeRunsOnlyWhatIsMissing) {
  const fs::path ckpt = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval/model_qwen3_5";
  const fs::path d = linnet::testing::fresh_dir("pipeline_resume");
  {
    std::ofstream in(d / "in.jsonl");
    for (int i = 0; i < 6; ++i) in << "{\"id\": " << i << ", \"text\": \"Once upon a time " << i << "\"}\n";
  }
  auto gen = [&](const std::string& out, std::vector<std::string> more, int np) {
    std::vector<std::string> a = {"generate", "--checkpoint", ckpt.string(), "--prompts", (d / "in.jsonl").string(),
                                  "--output", (d / out).string(), "--backend", "cpu", "--max-new-tokens", "12"};
    a.insert(a.end(), more.begin(), more.end());
    return linnet::testing::linnet_run(a, 120, np);
  };
  auto one = gen("one.jsonl", {}, 0);
  ASSERT_EQ(one.exit_code, 0) << one.errors;
  std::ifstream whole(d / "one.jsonl");
  std::string line, first_three;
  for (int i = 0; i < 3 && std::getline(whole, line); ++i) first_three += line + "\n";
  std::ofstream(d / "two.jsonl") << first_three;  // a run that stopped after three lines
  auto two = gen("two.jsonl", {"--resume", "--pp", "2"}, 2);
  if (two.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << two.output;
  ASSERT_EQ(two.exit_code, 0) << two.errors;
  EXPECT_NE(two.output.find("3 already done"), std::string::npos) << two.output;
  EXPECT_EQ(linnet::testing::slurp(d / "two.jsonl"), linnet::testing::slurp(d / "one.jsonl"));
}

// Quantized checkpoints through stages (the eval fixture's model in FP8 blocks and in W4A16): one
// stage's tokens and numbers at --pp 2.
TEST(Pipeline, QuantizedCheckpointsAnswerAsOneStage) {
  for (const char* scheme : {"fp8_block", "w4a16"}) {
    SCOPED_TRACE(scheme);
    const fs::path ckpt = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval" / (std::string("model_") + scheme);
    linnet::testing::expect_generate_and_eval_agree(ckpt, std::string("pp_") + scheme, {{2, {"--pp", "2"}}},
                                                    {{2, {"--pp", "2"}}});
  }
}
