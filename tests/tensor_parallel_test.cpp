// Shards > 1 under real mpirun (docs/entries.md "Weights and shards", "Numbers", "Ranks"): every
// entry, called in one sequence on one model state through `linnet run`, equals the same sequence
// on one rank — logits within the f32 bound, greedy and sampled tokens exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/safetensors.h"
#include "runtime/write_checkpoint.h"
#include "model_fixtures.h"
#include "mpi_run.h"

using namespace linnet;
using namespace linnet::testing;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures";

fs::path work_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("linnet_tp_" + name);
  fs::create_directories(d);
  return d;
}

Tensor i32(Shape s, std::vector<int64_t> v) { return Tensor::from_ints(std::move(s), v); }

// Inputs for all 17 entries at Batch 2, MaxSeq 64, PageSize 16 (4 pages a row, 8 in all),
// token ids below `vocab`, shifted by `salt` so two replicas get different inputs.
void write_inputs(const fs::path& path, int64_t vocab, int64_t salt) {
  auto tok = [&](std::vector<int64_t> v) {
    for (auto& x : v) x = (x * 7919 + salt * 104729) % vocab;
    return v;
  };
  // Pages of a shuffled table: row 0 → 5, 2, 7, 0; row 1 → 3, 6, 1, 4.
  std::vector<std::pair<std::string, Tensor>> in = {
      {"fwd", i32({2, 6}, tok({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}))},
      {"pre", i32({2, 5}, tok({21, 22, 23, 24, 25, 26, 27, 28, 29, 30}))},
      {"dec", i32({2, 1}, tok({31, 32}))},
      {"rows_tok", i32({2, 1}, tok({33, 34}))},
      {"rows_pos", i32({2}, {6, -1})},
      {"slot_tok", i32({1, 4}, tok({41, 42, 43, 44}))},
      {"slot_slots", i32({1}, {1})},
      {"slot_len", i32({1}, {3})},
      {"pk_tok", i32({9}, tok({51, 52, 53, 54, 55, 56, 57, 58, 59}))},
      {"pk_pos", i32({9}, {0, 1, 2, 3, 4, 2, 3, 4, 5})},
      {"pk_seg", i32({9}, {0, 0, 0, 0, 0, 1, 1, 1, 1})},
      {"pk_tgt", Tensor::from_ints({9}, tok({52, 53, 54, 55, 1, 57, 58, 59, 2}), DType::i64)},
      {"pk_w", Tensor::from_floats({9}, {1, 1, 0.5f, 1, 0, 1, 2, 1, 1})},
      {"pp_tok", i32({5}, tok({61, 62, 63, 64, 65}))},
      {"pp_rows", i32({5}, {0, 0, 0, 1, 1})},
      {"pp_pos", i32({5}, {0, 1, 2, 0, 1})},
      {"pp_seg", i32({5}, {0, 0, 0, 1, 1})},
      {"pp_last", i32({2}, {2, 4})},
      {"sp_tok", i32({3}, tok({71, 72, 73}))},
      {"sp_rows", i32({3}, {1, 1, 1})},
      {"sp_pos", i32({3}, {2, 3, 4})},
      {"sp_seg", i32({3}, {9, 9, 9})},
      {"sp_last", i32({2}, {-1, 2})},
      {"sp_step", i32({2, 1}, tok({74, 75}))},
      {"sp_step_pos", i32({2}, {3, -1})},
      {"table", i32({2, 4}, {5, 2, 7, 0, 3, 6, 1, 4})},
      {"dp_tok", i32({2, 1}, tok({81, 82}))},
      {"dp_pos", i32({2}, {20, 17})},
      // prefill_paged: row 0 positions 21, 22; row 1 positions 18, 19 (slot = page·16 + pos % 16).
      {"ppg_tok", i32({4}, tok({83, 84, 85, 86}))},
      {"ppg_pos", i32({4}, {21, 22, 18, 19})},
      {"ppg_rows", i32({4}, {0, 0, 1, 1})},
      {"ppg_slots", i32({4}, {2 * 16 + 5, 2 * 16 + 6, 6 * 16 + 2, 6 * 16 + 3})},
      {"ppg_last", i32({2}, {1, 3})},
      {"spg_tok", i32({1}, tok({87}))},
      {"spg_pos", i32({1}, {20})},
      {"spg_rows", i32({1}, {1})},
      {"spg_slots", i32({1}, {6 * 16 + 4})},
      {"spg_last", i32({2}, {-1, 0})},
      {"spg_step", i32({2, 1}, tok({88, 89}))},
      {"spg_step_pos", i32({2}, {23, -1})},
      {"gen", i32({2, 1}, tok({91, 92}))},
      {"key", Tensor::from_ints({2}, {12345 + salt, -987654321}, DType::i64)},
  };
  save_safetensors(path.string(), in);
}

const char* kCalls = R"([
  {"entry": "forward", "args": {"tokens": "fwd"}, "outputs": ["forward"]},
  {"entry": "next_token", "args": {"tokens": "fwd"}, "outputs": ["next_token"]},
  {"entry": "prefill", "args": {"tokens": "pre", "pos": 0}, "outputs": ["prefill"]},
  {"entry": "decode", "args": {"token": "dec", "pos": 5}, "outputs": ["decode"]},
  {"entry": "decode_rows", "args": {"tokens": "rows_tok", "positions": "rows_pos"}, "outputs": ["decode_rows"]},
  {"entry": "prefill_slots", "args": {"tokens": "slot_tok", "slots": "slot_slots", "lengths": "slot_len"}, "outputs": ["prefill_slots"]},
  {"entry": "loss_packed", "args": {"tokens": "pk_tok", "positions": "pk_pos", "segments": "pk_seg", "targets": "pk_tgt", "weights": "pk_w"}, "outputs": ["loss_packed"]},
  {"entry": "log_probs_packed", "args": {"tokens": "pk_tok", "positions": "pk_pos", "segments": "pk_seg", "targets": "pk_tgt"}, "outputs": ["log_probs_packed"]},
  {"entry": "hidden_packed", "args": {"tokens": "pk_tok", "positions": "pk_pos", "segments": "pk_seg"}, "outputs": ["hidden_packed"]},
  {"entry": "prefill_packed", "args": {"tokens": "pp_tok", "rows": "pp_rows", "positions": "pp_pos", "segments": "pp_seg", "last": "pp_last"}, "outputs": ["prefill_packed"]},
  {"entry": "step_packed", "args": {"tokens": "sp_tok", "rows": "sp_rows", "positions": "sp_pos", "segments": "sp_seg", "last": "sp_last", "step_tokens": "sp_step", "step_positions": "sp_step_pos"}, "outputs": ["step_packed"]},
  {"entry": "decode_paged", "args": {"tokens": "dp_tok", "positions": "dp_pos", "table": "table"}, "outputs": ["decode_paged"]},
  {"entry": "prefill_paged", "args": {"tokens": "ppg_tok", "positions": "ppg_pos", "rows": "ppg_rows", "slots": "ppg_slots", "last": "ppg_last", "table": "table"}, "outputs": ["prefill_paged"]},
  {"entry": "step_paged", "args": {"tokens": "spg_tok", "positions": "spg_pos", "rows": "spg_rows", "slots": "spg_slots", "last": "spg_last", "step_tokens": "spg_step", "step_positions": "spg_step_pos", "table": "table"}, "outputs": ["step_paged"]},
  {"entry": "generate", "args": {"token": "gen", "pos": 30}, "generics": {"Steps": 6}, "outputs": ["generate"]},
  {"entry": "sample", "args": {"token": "gen", "pos": 40, "key": "key", "temperature": 0.9}, "generics": {"Steps": 6}, "outputs": ["sample"]},
  {"entry": "generate_until", "args": {"token": "gen", "pos": 50, "eos": 2}, "generics": {"MaxNew": 8}, "outputs": ["generate_until", "generate_until_n"]}
])";

std::vector<std::string> run_args(const fs::path& ckpt, const fs::path& dir, const std::string& in, const std::string& out,
                                  std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"run", "--checkpoint", ckpt.string(), "--calls", (dir / "calls.json").string(),
                                "--inputs", (dir / in).string(), "--outputs", (dir / out).string(), "--backend", "cpu",
                                "--batch", "2", "--max-seq", "64", "--page-size", "16",
                                "--log-level", "info"};  // every rank says which shard it is
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

void expect_same_outputs(const fs::path& one, const fs::path& many, const std::string& what, double bound = 1e-4,
                         bool tokens_exact = true) {
  SafetensorsFile a(one.string()), b(many.string());
  ASSERT_EQ(a.names().size(), 18u);
  for (const auto& name : a.names()) {
    const Tensor x = a.read(name), y = b.read(name);
    ASSERT_EQ(x.shape(), y.shape()) << what << " " << name;
    if (is_float(x.dtype())) {
      EXPECT_LT(rel_diff(y, x), bound) << what << " " << name;
    } else if (tokens_exact) {
      EXPECT_EQ(x.to_ints(), y.to_ints()) << what << " " << name;
    }
  }
}

// stories15M (6 heads, vocab 32000) imported once; a random tiny GQA model (8 heads over 4
// KV heads, vocab 1000) for Shards 4.
fs::path stories15m() { return linnet::testing::stories15m_checkpoint(); }
// (`layers` of them, from weights of `seed`.)
fs::path tiny_gqa(int64_t layers = 2, uint64_t seed = 3) {
  const std::string name = layers == 2 ? "linnet_tiny_gqa" : str("linnet_tiny_gqa", layers);
  return linnet::testing::shared_checkpoint(name, [&](const std::string& d) {
    ModelConfig c = linnet::testing::tiny_config();
    c.vocab = 1000;
    c.hidden = 64;
    c.heads = 8;
    c.kv_heads = 4;
    c.inner = 96;
    c.layers = layers;
    c.max_position = 64;
    write_random_checkpoint(c, d, DType::f32, seed);
  });
}

// Tied, with a vocab (97) that no Shards divides: the lm_head slices are views of the
// embedding, the last one shorter (its logits' columns padded).
fs::path tied_padded() {
  return linnet::testing::shared_checkpoint("linnet_tied_padded", [](const std::string& d) {
    ModelConfig c = linnet::testing::tiny_config();
    c.hidden = 48;
    c.heads = 6;
    c.kv_heads = 6;
    c.inner = 96;
    c.max_position = 64;
    c.tie_word_embeddings = true;
    write_random_checkpoint(c, d, DType::f32, 4);
  });
}

void shards_equal_one_rank(const fs::path& ckpt, int64_t vocab, std::vector<int> ranks, const std::string& name) {
  if (ckpt.empty()) GTEST_SKIP() << linnet::testing::stories15m_files().why_not;
  const fs::path d = work_dir(name);
  write_inputs(d / "in.safetensors", vocab, 0);
  std::ofstream(d / "calls.json") << kCalls;
  auto one = mpi_run(1, LINNET_BINARY, run_args(ckpt, d, "in.safetensors", "one.safetensors"), 120);
  if (one.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << one.output;
  ASSERT_EQ(one.exit_code, 0) << one.output;
  for (int np : ranks) {
    const std::string out = "np" + std::to_string(np) + ".safetensors";
    auto r = mpi_run(np, LINNET_BINARY, run_args(ckpt, d, "in.safetensors", out), 180);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("shard " + std::to_string(np - 1) + " of " + std::to_string(np)), std::string::npos);
    expect_same_outputs(d / "one.safetensors", d / out, name + " Shards " + std::to_string(np));
  }
}

// Every output of `many` the same bytes as `one`'s (pipeline stages change no arithmetic).
void expect_same_bits(const fs::path& one, const fs::path& many, const std::string& what) {
  SafetensorsFile a(one.string()), b(many.string());
  ASSERT_EQ(a.names().size(), 18u);
  for (const auto& name : a.names()) {
    const Tensor x = a.read(name), y = b.read(name);
    ASSERT_EQ(x.shape(), y.shape()) << what << " " << name;
    EXPECT_TRUE(x.nbytes() == y.nbytes() && std::memcmp(x.data(), y.data(), x.nbytes()) == 0) << what << " " << name;
  }
}

}  // namespace

// Pipeline stages (issue 41): every entry's outputs — logits, log-probs, hidden states, greedy and
// sampled tokens — at --pp 2, 3 and 4 (and --pp 2 × --tp 2 against --tp 2, on 4 ranks and on 8 as
// two replicas) the same bits as one stage; the tied, padded vocab's lm_head (a view of the
// embedding the last stage loads too) at --pp 2.
TEST(TensorParallel, PipelineStagesEveryEntryTheSameBitsAsOneStage) {
  const fs::path ckpt = tiny_gqa(4, 5), d = work_dir("pipeline");  // four layers: stages of 2, 1 and 1
  write_inputs(d / "in.safetensors", 1000, 0);
  std::ofstream(d / "calls.json") << kCalls;
  auto one = mpi_run(1, LINNET_BINARY, run_args(ckpt, d, "in.safetensors", "one.safetensors"), 120);
  if (one.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << one.output;
  ASSERT_EQ(one.exit_code, 0) << one.output;
  for (int pp : {2, 3, 4}) {
    const std::string out = "pp" + std::to_string(pp) + ".safetensors";
    auto r = mpi_run(pp, LINNET_BINARY, run_args(ckpt, d, "in.safetensors", out, {"--pp", std::to_string(pp)}), 180);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(str("stage ", pp - 1, " of ", pp)), std::string::npos) << r.output;
    expect_same_bits(d / "one.safetensors", d / out, "--pp " + std::to_string(pp));
  }
  auto tp2 = mpi_run(2, LINNET_BINARY, run_args(ckpt, d, "in.safetensors", "tp2.safetensors", {"--tp", "2"}), 180);
  ASSERT_EQ(tp2.exit_code, 0) << tp2.output;
  auto both = mpi_run(4, LINNET_BINARY, run_args(ckpt, d, "in.safetensors", "pp2tp2.safetensors", {"--tp", "2", "--pp", "2"}), 180);
  ASSERT_EQ(both.exit_code, 0) << both.output;
  EXPECT_NE(both.output.find("stage 1 of 2 (mpi between stages), shard 1 of 2"), std::string::npos) << both.output;
  expect_same_bits(d / "tp2.safetensors", d / "pp2tp2.safetensors", "--pp 2 --tp 2");
  // Eight ranks: two replicas, each of two stages of two shards, each its own outputs.
  auto eight = mpi_run(8, LINNET_BINARY,
                       run_args(ckpt, d, "in.safetensors", "pp8_{replica}.safetensors", {"--tp", "2", "--pp", "2"}), 240);
  ASSERT_EQ(eight.exit_code, 0) << eight.output;
  EXPECT_NE(eight.output.find("8 ranks = 2 replicas × 2 stages × 2 shards"), std::string::npos) << eight.output;
  for (int rep = 0; rep < 2; ++rep)
    expect_same_bits(d / "tp2.safetensors", d / ("pp8_" + std::to_string(rep) + ".safetensors"),
                     "-np 8 --pp 2 --tp 2, replica " + std::to_string(rep));
  const fs::path tied = tied_padded(), dt = work_dir("pipeline_tied");
  write_inputs(dt / "in.safetensors", 97, 0);
  std::ofstream(dt / "calls.json") << kCalls;
  auto tied_one = mpi_run(1, LINNET_BINARY, run_args(tied, dt, "in.safetensors", "one.safetensors"), 120);
  ASSERT_EQ(tied_one.exit_code, 0) << tied_one.output;
  auto tied_pp = mpi_run(2, LINNET_BINARY, run_args(tied, dt, "in.safetensors", "pp2.safetensors", {"--pp", "2"}), 120);
  ASSERT_EQ(tied_pp.exit_code, 0) << tied_pp.output;
  expect_same_bits(dt / "one.safetensors", dt / "pp2.safetensors", "tied --pp 2");
}

TEST(TensorParallel, Stories15MEveryEntryShards2And3EqualOneRank) {
  shards_equal_one_rank(stories15m(), 32000, {2, 3}, "stories");  // Shards 3 pads the vocab
}

TEST(TensorParallel, TiedPaddedVocabEveryEntryShards2And3EqualOneRank) {
  shards_equal_one_rank(tied_padded(), 97, {2, 3}, "tied");
}

TEST(TensorParallel, TinyGqaEveryEntryShards2And4EqualOneRank) {
  shards_equal_one_rank(tiny_gqa(), 1000, {2, 4}, "tiny");
}

// --tp 2 on 4 ranks: two replicas of two shards, each on its own inputs; each replica's
// outputs equal its own Shards-2 run.
TEST(TensorParallel, TwoReplicasOfTwoShardsEachMatchTheirShards2Run) {
  const fs::path ckpt = tiny_gqa(), d = work_dir("replicas");
  write_inputs(d / "in0.safetensors", 1000, 0);
  write_inputs(d / "in1.safetensors", 1000, 1);
  std::ofstream(d / "calls.json") << kCalls;
  auto r = mpi_run(4, LINNET_BINARY, run_args(ckpt, d, "in{replica}.safetensors", "dp{replica}.safetensors", {"--tp", "2"}), 180);
  if (r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("replica 1 of 2, shard 1 of 2"), std::string::npos) << r.output;
  for (int rep = 0; rep < 2; ++rep) {
    const std::string in = "in" + std::to_string(rep) + ".safetensors", ref = "ref" + std::to_string(rep) + ".safetensors";
    auto s = mpi_run(2, LINNET_BINARY, run_args(ckpt, d, in, ref), 180);
    ASSERT_EQ(s.exit_code, 0) << s.output;
    expect_same_outputs(d / ref, d / ("dp" + std::to_string(rep) + ".safetensors"), "replica " + std::to_string(rep));
  }
  // The replicas really ran different inputs.
  SafetensorsFile a((d / "dp0.safetensors").string()), b((d / "dp1.safetensors").string());
  EXPECT_NE(a.read("generate").to_ints(), b.read("generate").to_ints());
}

TEST(TensorParallel, DivisibilityErrorOnEveryRankAndNoHang) {
  const fs::path ckpt = stories15m();
  if (ckpt.empty()) GTEST_SKIP() << linnet::testing::stories15m_files().why_not;
  const fs::path d = work_dir("divide");
  write_inputs(d / "in.safetensors", 32000, 0);
  std::ofstream(d / "calls.json") << kCalls;
  auto r = mpi_run(4, LINNET_BINARY, run_args(ckpt, d, "in.safetensors", "out.safetensors"), 60);
  if (r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 20);
  // Each of the four ranks reports the rule itself.
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(r.output.find("[rank " + std::to_string(rank) + "] [error] Heads=6 does not divide by Shards=4"), std::string::npos)
        << r.output;
}

TEST(TensorParallel, BadInputOnOneCallEndsTheJobCleanly) {
  const fs::path ckpt = tiny_gqa(), d = work_dir("badcall");
  write_inputs(d / "in.safetensors", 1000, 0);
  std::ofstream(d / "calls.json") << R"([
    {"entry": "prefill", "args": {"tokens": "pre", "pos": 0}, "outputs": ["a"]},
    {"entry": "decode", "args": {"token": "dec", "pos": 64}, "outputs": ["b"]}])";
  auto r = mpi_run(2, LINNET_BINARY, run_args(ckpt, d, "in.safetensors", "out.safetensors"), 60);
  if (r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("decode: pos = 64 is outside [0, MaxSeq=64)"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(d / "out.safetensors"));
}

// The CUDA backend runs every entry like the CPU backend (f32: 1e-4 and the same tokens; bf16:
// 2e-2 on the logits); then two ranks sharing the one GPU (MPI staging device tensors through
// the host) equal one. On stories15M where it can be had, else on the tied, padded tiny model
// (a GPU machine has no stories15M). Skipped without a GPU.
namespace {
void cuda_equals_cpu_and_two_ranks_on_one_gpu(const fs::path& ckpt, int64_t vocab, const std::string& name) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device is visible: " << cuda_status();
  const fs::path d = work_dir(name);
  write_inputs(d / "in.safetensors", vocab, 0);
  std::ofstream(d / "calls.json") << kCalls;
  auto with_backend = [&](std::vector<std::string> a, const std::string& backend, const std::string& dtype) {
    for (auto& x : a)
      if (x == "cpu") x = backend;
    a.insert(a.end(), {"--dtype", dtype});
    return a;
  };
  for (const std::string dtype : {"f32", "bf16"}) {
    const std::string cpu_out = "cpu_" + dtype + ".safetensors", gpu_out = "gpu_" + dtype + ".safetensors";
    auto c = mpi_run(1, LINNET_BINARY, with_backend(run_args(ckpt, d, "in.safetensors", cpu_out), "cpu", dtype), 300);
    if (c.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << c.output;
    ASSERT_EQ(c.exit_code, 0) << c.output;
    auto g = mpi_run(1, LINNET_BINARY, with_backend(run_args(ckpt, d, "in.safetensors", gpu_out), "cuda", dtype), 300);
    ASSERT_EQ(g.exit_code, 0) << g.output;
    const bool f32 = dtype == "f32";
    expect_same_outputs(d / cpu_out, d / gpu_out, "cuda " + dtype, f32 ? 1e-4 : 2e-2, f32);
  }
  auto two = mpi_run(2, LINNET_BINARY, with_backend(run_args(ckpt, d, "in.safetensors", "gpu2.safetensors"), "cuda", "f32"),
                     300);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("(mpi communicator)"), std::string::npos) << two.output;
  expect_same_outputs(d / "gpu_f32.safetensors", d / "gpu2.safetensors", "cuda Shards 2 on one GPU");
}
}  // namespace

TEST(CudaEntries, EveryEntryOnCudaEqualsCpuAndTwoRanksOnOneGpu) {
  const fs::path stories = linnet::testing::stories15m_files().dir.empty() ? fs::path() : stories15m();
  if (stories.empty()) cuda_equals_cpu_and_two_ranks_on_one_gpu(tied_padded(), 97, "cuda_tiny");
  else cuda_equals_cpu_and_two_ranks_on_one_gpu(stories, 32000, "cuda_stories");
}
