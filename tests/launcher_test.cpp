// The `linnet` command: inspect's card against the seed, llama2.c import, and stories15M.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/checkpoint_weights.h"
#include "runtime/loader.h"
#include "checkpoint/safetensors.h"
#include "runtime/write_checkpoint.h"
#include "model_fixtures.h"
#include "reference_llama.h"
#include "mpi_run.h"

using namespace linnet;
namespace fs = std::filesystem;

using linnet::testing::fresh_dir;
using linnet::testing::slurp;

namespace {

struct Output {
  int code;
  std::string out;
};
Output linnet_cmd(const std::string& args) {
  const std::string cmd = std::string(LINNET_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

const fs::path kFixtures = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures";

}  // namespace

TEST(Inspect, ReproducesTheSeedCardForLlama3_8B) {
  const fs::path d = fresh_dir("inspect");
  fs::copy_file(kFixtures / "configs/llama-3-8b.json", d / "config.json");
  const Output r = linnet_cmd("inspect --checkpoint " + d.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string seed = slurp(kFixtures / "card/llama-3-8b.txt");
  const auto from_entries = [](const std::string& s) { return s.substr(s.find("\nEntries\n") + 1); };
  EXPECT_EQ(from_entries(r.out), from_entries(seed));  // byte for byte, to the end
}

TEST(Inspect, ShardsSectionGivesPerRankSizes) {
  const fs::path d = fresh_dir("inspect_shards");
  fs::copy_file(kFixtures / "configs/llama-3-8b.json", d / "config.json");
  const Output r = linnet_cmd("inspect --checkpoint " + d.string() + " --shards 2 --batch 4 --backend cuda");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("layers[*].attention.q_proj.weight\trows\t[2048, 4096]\tbf16\t16777216 ×32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lm_head.weight\trows\t[64128, 4096]\tbf16\t525336576"), std::string::npos);
  // KV cache: 2 × 32 layers × [4, 4, 8192, 128] × 2 bytes = 2 GiB per rank.
  EXPECT_NE(r.out.find("KV cache per rank\t2147483648 (2.00 GiB)"), std::string::npos) << r.out;
  const Output bad = linnet_cmd("inspect --checkpoint " + d.string() + " --shards 3");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("Heads=32 does not divide by Shards=3"), std::string::npos) << bad.out;
}

// An FP8 checkpoint (issue 37): each linear layer's matrix is stored as quantization_config
// says, a byte a weight and an f32 scale a block, and inspect says so per parameter.
TEST(Inspect, Fp8CheckpointShowsTheStoredLayoutAndItsBytes) {
  const Output r = linnet_cmd("inspect --checkpoint " + (kFixtures / "golden/fp8_block").string() +
                              " --shards 2 --backend cpu");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("stored fp8 8×16 (not converted: lm_head)"), std::string::npos) << r.out;
  // q_proj on a rank: [32, 64] E4M3 bytes + [4, 4] f32 scales.
  EXPECT_NE(r.out.find("layers[*].attention.q_proj.weight\trows\t[32, 64]\tfp8 8×16\t" + std::to_string(32 * 64 + 16 * 4) +
                       " ×2"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("lm_head.weight\trows\t[64, 64]\tbf16\t8192"), std::string::npos) << r.out;
}

// docs/cluster.md plans Llama-3.1-70B on paper (weights and KV cache per GPU at Shards 4
// and 8, Batch 32, MaxSeq 8192); inspect must print the same per-rank bytes, and the doc
// must quote them.
TEST(Inspect, Llama31_70BPlanInDocsMatches) {
  const int64_t V = 128256, H = 8192, heads = 64, kv_heads = 8, hd = 128, inner = 28672, L = 80;
  const std::string doc = slurp(fs::path(LINNET_SOURCE_DIR) / "docs/cluster.md");
  for (int64_t S : {4, 8}) {
    SCOPED_TRACE(S);
    const int64_t sharded = (H * heads * hd + 2 * H * kv_heads * hd + heads * hd * H + 3 * H * inner) / S * 2;
    const int64_t params = V * H * 2 /* embedding, mirrored */ + L * sharded + (2 * L + 1) * H * 2 /* norms */ +
                           V / S * H * 2 /* lm_head rows */;
    const int64_t kv = 2 * L * 32 * (kv_heads / S) * 8192 * hd * 2;
    const Output r = linnet_cmd("inspect --checkpoint " + (kFixtures / "configs/llama-3.1-70b.json").string() +
                                " --shards " + std::to_string(S) + " --batch 32 --max-seq 8192 --backend cuda");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("Parameters per rank\t" + std::to_string(params) + " "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("KV cache per rank\t" + std::to_string(kv) + " "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("Total per rank\t" + std::to_string(params + kv) + " "), std::string::npos) << r.out;
    EXPECT_NE(doc.find(std::to_string(params)), std::string::npos) << "docs/cluster.md lacks " << params;
    EXPECT_NE(doc.find(std::to_string(kv)), std::string::npos) << "docs/cluster.md lacks " << kv;
  }
}

// A plan's figures computed from the shapes: `linnet inspect PRESET --shards S --batch 8
// --max-seq 32768 --backend cuda` prints them, and docs/cluster.md quotes them. Returns inspect's
// output.
static std::string expect_plan(const std::string& preset, int64_t shards, int64_t params, int64_t cache) {
  static const std::string doc = slurp(fs::path(LINNET_SOURCE_DIR) / "docs/cluster.md");
  const Output r = linnet_cmd(str("inspect --checkpoint ", preset, " --shards ", shards,
                                  " --batch 8 --max-seq 32768 --backend cuda"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Parameters per rank\t" + std::to_string(params) + " "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KV cache per rank\t" + std::to_string(cache) + " "), std::string::npos) << r.out;
  EXPECT_NE(doc.find(std::to_string(params) + " B"), std::string::npos) << "docs/cluster.md lacks " << params;
  EXPECT_NE(doc.find(std::to_string(cache) + " B"), std::string::npos) << "docs/cluster.md lacks " << cache;
  return r.out;
}

// DeepSeek-V3's and Kimi K2's plans (docs/cluster.md) from their shapes: FP8 matrices with a
// float per 128×128 block, kv_b_proj held in bf16 (absorbed), f32 routers, Experts/Shards whole
// experts a rank, the latent cache whole on every rank; inspect prints them, the page quotes them.
TEST(Inspect, DeepSeekV3AndKimiK2PlansInDocsMatch) {
  auto fp8 = [](int64_t r, int64_t c) { return r * c + (r + 127) / 128 * ((c + 127) / 128) * 4; };
  struct Model {
    const char* preset;
    int64_t heads, experts, vocab, dense;
  };
  for (const Model m : {Model{"deepseek-v3", 128, 256, 129280, 3}, Model{"kimi-k2", 64, 384, 163840, 1}})
    for (int64_t S : {8, 16}) {
      SCOPED_TRACE(str(m.preset, " ", S));
      const int64_t H = 7168, L = 61, hs = m.heads / S;
      const int64_t attention = 2 * H * 2 + fp8(1536, H) + 1536 * 2 + fp8(hs * 192, 1536) + fp8(576, H) + 512 * 2 +
                                hs * 256 * 512 * 2 /* kv_b_proj, bf16 */ + fp8(H, hs * 128);
      const int64_t dense = 2 * fp8(18432 / S, H) + fp8(H, 18432 / S);
      const int64_t sparse = m.experts * H * 4 + m.experts * 4 /* f32 router and bias */ + 2 * fp8(2048 / S, H) +
                             fp8(H, 2048 / S) + m.experts / S * 3 * fp8(2048, H);
      const int64_t params = m.vocab * H * 2 + H * 2 + (m.vocab + S - 1) / S * H * 2 + L * attention + m.dense * dense +
                             (L - m.dense) * sparse;
      const int64_t cache = L * 8 * 32768 * 576 * 2;
      EXPECT_NE(expect_plan(m.preset, S, params, cache).find("61 layers × [8, 32768, 576] bf16 (cache_latent"),
                std::string::npos);
    }
}

// Mistral Small 4 (the mistral-4 preset: Mistral 3's wrapper around mistral4) in bf16, from its
// shapes: the latent attention with W_UK/W_UV held per head (nope 64 + v 128 rows of kv_lora
// 256), the router in T, one shared expert; the latent cache 320 values a token and layer.
TEST(Inspect, Mistral4PlanInDocsMatches) {
  const int64_t H = 4096, L = 36, V = 131072;
  for (int64_t S : {2, 4}) {
    SCOPED_TRACE(S);
    const int64_t hs = 32 / S;
    const int64_t attention = 2 * H * 2 + 1024 * H * 2 + 1024 * 2 + hs * 128 * 1024 * 2 + 320 * H * 2 + 256 * 2 +
                              hs * 192 * 256 * 2 /* kv_b_proj: W_UK, W_UV */ + H * hs * 128 * 2;
    const int64_t experts = 128 * H * 2 /* router, bf16 */ + 3 * (2048 / S) * H * 2 + 128 / S * 3 * 2048 * H * 2;
    const int64_t params = V * H * 2 + H * 2 + V / S * H * 2 + L * (attention + experts);
    const int64_t cache = L * 8 * 32768 * 320 * 2;
    expect_plan("mistral-4", S, params, cache);
  }
}

// gpt-oss-120b as it ships (the preset: its experts MXFP4, the rest bf16), from its shapes: the
// attention with biases and f32 sinks split by heads; under expert sharding Experts/Shards whole
// experts a rank, each gate_up [5760, 2880] and down [2880, 2880] at half a byte a weight plus an
// E8M0 byte per 32; the router, its bias and the experts' bias tables mirrored; GQA's cache.
TEST(Inspect, GptOss120bPlanInDocsMatches) {
  const int64_t H = 2880, L = 36, V = 201088, E = 128, I = 2880;
  auto mxfp4 = [](int64_t rows, int64_t cols) { return rows * cols / 2 + rows * cols / 32; };
  for (int64_t S : {1, 2, 4}) {
    SCOPED_TRACE(S);
    const int64_t q = 64 / S * 64, kv = 8 / S * 64;
    const int64_t attention = 2 * H * 2 + (q + 2 * kv) * H * 2 + (q + 2 * kv) * 2 + H * q * 2 + H * 2 + 64 / S * 4;
    const int64_t experts = E * H * 2 + E * 2 + E * 2 * I * 2 + E * H * 2 + E / S * (mxfp4(2 * I, H) + mxfp4(H, I));
    const int64_t params = V * H * 2 + H * 2 + V / S * H * 2 + L * (attention + experts);
    const int64_t cache = 2 * L * 8 * (8 / S) * 32768 * 64 * 2;
    const std::string out = expect_plan("gpt-oss-120b", S, params, cache);
    EXPECT_EQ(out.find("Refused at load"), std::string::npos) << out;  // expert sharding: whole experts
    EXPECT_EQ(out.find("tensor\t") != std::string::npos && out.find("refused at load") != std::string::npos, S == 4) << out;
  }
  // Tensor sharding cuts each expert's 2880 inner rows into 720 at Shards 4: not whole MXFP4
  // blocks of 32, which the loader refuses; inspect says so for this run and in the comparison.
  Output r = linnet_cmd("inspect --checkpoint gpt-oss-120b --shards 4 --moe-sharding tensor");
  EXPECT_NE(r.out.find("\nRefused at load: model.layers.0.mlp.experts."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuts a block of 32 (mxfp4 1×32 blocks)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(this run)  refused at load"), std::string::npos) << r.out;
  r = linnet_cmd("inspect --checkpoint gpt-oss-120b --shards 2 --moe-sharding tensor");  // 1440 = 45 blocks
  EXPECT_EQ(r.out.find("efused at load"), std::string::npos) << r.out;
}

// A hybrid's plan (issue 40): Qwen3-Next-80B-A3B at Shards 4, Batch 8, MaxSeq 4096 — its 12
// full-attention layers keep K/V (its 2 KV heads replicated: one a rank), its 36 Gated DeltaNet
// layers a state a row: the conv's last 3 inputs of this rank's q|k|v channels and the delta
// state of its 8 value heads, f32.
TEST(Inspect, AHybridsRecurrentStateIsCountedPerRank) {
  const Output r = linnet_cmd("inspect --checkpoint qwen3-next-80b-a3b --shards 4 --batch 8 --max-seq 4096 --backend cuda");
  ASSERT_EQ(r.code, 0) << r.out;
  const int64_t channels = (2 * 16 * 128 + 32 * 128) / 4, state = 36 * 8 * (channels * 3 + 32 / 4 * 128 * 128) * 4;
  const int64_t cache = 2 * 12 * 8 * 1 * 4096 * 256 * 2;
  EXPECT_NE(r.out.find("KV cache per rank\t" + std::to_string(cache) + " "), std::string::npos) << r.out;
  // Batch rows and, by default, as many snapshots (prefix sharing); --state-snapshots 0 halves it.
  EXPECT_NE(r.out.find(str("Recurrent state per rank\t", 2 * state, " (301.50 MiB) = 36 layers × (8 rows + 8 snapshots) × "
                           "([2048, 3] + [8, 128, 128]) f32")),
            std::string::npos)
      << r.out;
  const Output none = linnet_cmd("inspect --checkpoint qwen3-next-80b-a3b --shards 4 --batch 8 --max-seq 4096 --backend cuda "
                                 "--state-snapshots 0");
  EXPECT_NE(none.out.find(str("Recurrent state per rank\t", state, " (150.75 MiB) = 36 layers × (8 rows + 0 snapshots)")),
            std::string::npos)
      << none.out;
  EXPECT_NE(linnet_cmd("inspect --checkpoint deepseek-v3 --batch 8 --state-snapshots 2").out.find(
                "--state-snapshots 2: deepseek_v3 keeps no recurrent state (only models with Gated DeltaNet layers do)"),
            std::string::npos);
  // Each layer kind's tensors once, × the layers that have them.
  EXPECT_NE(r.out.find("layers[*].linear_attention.v_proj.weight\trows\t[1024, 2048]\tbf16\t4194304 ×36"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layers[*].attention.o_proj.weight\tcolumns\t[2048, 1024]\tbf16\t4194304 ×12"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layers[*].attention_norm.weight\tmirrored\t[2048]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" ×48\n"), std::string::npos) << r.out;
}

TEST(Inspect, UnderMpirunPrintsTheCardOnce) {
  const fs::path d = fresh_dir("inspect_mpi");
  fs::copy_file(kFixtures / "configs/llama-3-8b.json", d / "config.json");
  const auto r = linnet::testing::mpi_run(2, LINNET_BINARY, {"inspect", "--checkpoint", d.string()}, 60);
  if (r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t count = 0;
  for (size_t at = 0; (at = r.output.find("\nEntries\n", at)) != std::string::npos; ++at) ++count;
  EXPECT_EQ(count, 1u) << r.output;
}

// A synthetic llama2.c file: q/k rows are permuted from Meta's interleaved pairs to
// rotate_half halves; everything else is copied in order.
TEST(ImportLlama2c, PermutesQueryAndKeyRows) {
  const fs::path d = fresh_dir("llama2c");
  const int32_t dim = 8, hidden = 12, layers = 1, heads = 2, kv_heads = 1, vocab = 5, seq = 4;
  const int64_t hd = dim / heads, kv_dim = kv_heads * hd;
  std::vector<float> data;
  auto block = [&](int64_t n) {
    const size_t start = data.size();
    for (int64_t i = 0; i < n; ++i) data.push_back(static_cast<float>(data.size()));
    return start;
  };
  block(vocab * dim);
  block(dim);
  const size_t wq = block(dim * dim), wk = block(kv_dim * dim);
  block(kv_dim * dim + dim * dim + dim + 3 * hidden * dim + dim + seq * hd);
  {
    std::ofstream out(d / "tiny.bin", std::ios::binary);
    const int32_t h[7] = {dim, hidden, layers, heads, kv_heads, vocab, seq};
    out.write(reinterpret_cast<const char*>(h), sizeof h);
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
  }
  const Output r = linnet_cmd("import-llama2c --input " + (d / "tiny.bin").string() + " --out " + (d / "hf").string());
  ASSERT_EQ(r.code, 0) << r.out;
  SafetensorsFile f((d / "hf/model.safetensors").string());
  EXPECT_FALSE(f.has("lm_head.weight"));  // positive vocab: tied
  const auto q = f.read("model.layers.0.self_attn.q_proj.weight").to_floats();
  const auto k = f.read("model.layers.0.self_attn.k_proj.weight").to_floats();
  for (int64_t head = 0; head < heads; ++head)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t i = 0; i < hd / 2; ++i)
        for (int64_t c = 0; c < dim; ++c) {
          const int64_t hf_row = head * hd + t * hd / 2 + i, meta_row = head * hd + 2 * i + t;
          ASSERT_EQ(q[hf_row * dim + c], data[wq + meta_row * dim + c]);
          if (head < kv_heads) {
            ASSERT_EQ(k[hf_row * dim + c], data[wk + meta_row * dim + c]);
          }
        }
  EXPECT_EQ(f.read("model.norm.weight").to_floats()[0], data[data.size() - seq * hd - dim]);
  // A file whose size disagrees with its header is refused.
  fs::resize_file(d / "tiny.bin", fs::file_size(d / "tiny.bin") - 4);
  const Output bad = linnet_cmd("import-llama2c --input " + (d / "tiny.bin").string() + " --out " + (d / "hf2").string());
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("does not match its header"), std::string::npos) << bad.out;
}

TEST(Stories15M, GreedyContinuationOfOnceUponATime) {
  const fs::path d = linnet::testing::stories15m_checkpoint();
  LINNET_NEED_STORIES15M();
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  RunOptions o;
  LoadedModel m = load_model(d.string(), o, *be, comm);
  m.model->prefill(Tensor::from_ints({1, 4}, {1, 9038, 2501, 263}), 0);
  const Tensor out = m.model->generate(Tensor::from_ints({1, 1}, {931}), 4, 10);
  EXPECT_EQ(out.to_ints(), (std::vector<int64_t>{29892, 727, 471, 263, 2217, 7826, 4257, 365, 2354, 29889}));
}

// The real model against the float64 reference written from the definition.
TEST(Stories15M, ForwardMatchesFloat64Reference) {
  const fs::path d = linnet::testing::stories15m_checkpoint();
  LINNET_NEED_STORIES15M();
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  LoadedModel m = load_model(d.string(), RunOptions{}, *be, comm);
  CheckpointDir files(d.string());
  CheckpointWeights w(files, DType::f32);
  linnet::testing::ReferenceLlama ref(m.config, w);
  const std::vector<int64_t> toks = {1, 9038, 2501, 263, 931, 29892, 727, 471};
  std::vector<int64_t> pos(toks.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int64_t>(i);
  const auto want = ref.run(toks, pos);
  const Tensor got = m.model->forward(Tensor::from_ints({1, 8}, toks));
  EXPECT_LT(linnet::testing::rel_diff(got, Tensor::from_floats(got.shape(), std::vector<float>(want.begin(), want.end()))),
            1e-5);
}

// What the model refuses inside a call names the call and its entry (issue 40: a hybrid's state
// is a running one, so a second prefill of row 0 at position 5 after it reached 10 is refused).
TEST(Launcher, ARefusedCallNamesItsIndexAndEntry) {
  const fs::path d = fresh_dir("refused_call");
  std::ofstream(d / "calls.json") << R"([{"entry": "prefill", "args": {"tokens": [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14]], "pos": 0}},
                                         {"entry": "prefill", "args": {"tokens": [[5, 6, 7]], "pos": 5}}])";
  const Output r = linnet_cmd("run --checkpoint " + (fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden/qwen3_5").string() +
                              " --calls " + (d / "calls.json").string() + " --backend cpu --max-seq 32");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("calls.json: call 1 (prefill): row 0 at position 5: this model's Gated DeltaNet layers keep one "
                       "running state a row"),
            std::string::npos)
      << r.out;
}

// A failure one rank alone sees (only shard 0 reads --inputs) ends every rank, no hang.
TEST(Launcher, MissingInputFileOnOneRankEndsTheJob) {
  const fs::path d = fresh_dir("missing_input");
  ModelConfig c = linnet::testing::tiny_config();
  write_random_checkpoint(c, (d / "ckpt").string(), DType::f32, 1);
  std::ofstream(d / "calls.json") << R"([{"entry": "forward", "args": {"tokens": "t"}}])";
  const auto r = linnet::testing::mpi_run(
      2, LINNET_BINARY,
      {"run", "--checkpoint", (d / "ckpt").string(), "--calls", (d / "calls.json").string(), "--inputs",
       (d / "nope.safetensors").string(), "--backend", "cpu"},
      60);
  if (r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 20);
  EXPECT_NE(r.output.find("nope.safetensors"), std::string::npos) << r.output;
}

TEST(Bench, ReportsFiguresBesideTheirFloorsOnTheCpu) {
  const fs::path d = fresh_dir("bench");
  const Output r = linnet_cmd("bench --config tiny --random-weights --backend cpu --batch 2 --prompt 8 --gen 4 "
                              "--warmup 1 --repeats 2 --json " + (d / "bench.json").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("prefill"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(d / "bench.json"));
  EXPECT_EQ(j["batch"], 2);
  for (const char* phase : {"prefill", "decode"})
    for (const char* key : {"tokens_per_s", "fraction_of_floor"}) {
      const double v = j[phase][key].get<double>();
      EXPECT_TRUE(std::isfinite(v) && v > 0) << phase << "." << key << " = " << v;
    }
  // On the CPU the decode floor is a read bandwidth measured with the run's own threads.
  EXPECT_GT(j["ceilings"]["bandwidth_GBps"].get<double>(), 0);
  EXPECT_EQ(j["ceilings"]["bandwidth"], "read");
  EXPECT_EQ(j["ceilings"]["matmul"], "OpenBLAS sgemm");
  EXPECT_FALSE(j.contains("profile")) << "no --profile, no profile";
}

// bench-engine at a config's shapes with random weights (what a GPU run measures without a
// checkpoint), the baselines left out: only the continuous-batching figures.
TEST(BenchEngine, RandomWeightsWithoutBaselines) {
  const fs::path d = fresh_dir("bench-engine");
  const Output r = linnet_cmd("bench-engine --config tiny --random-weights --backend cpu --prompts 6 --prompt-min 4 "
                              "--prompt-max 12 --max-new-tokens 5 --no-single --no-eval --json " + (d / "r.json").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(slurp(d / "r.json"));
  EXPECT_EQ(j["model"], "tiny (random weights)");
  EXPECT_GT(j["generate"]["batched_tok_s"].get<double>(), 0);
  EXPECT_FALSE(j["generate"].contains("single_s"));
  EXPECT_FALSE(j.contains("eval"));
  EXPECT_EQ(r.out.find("one at a time"), std::string::npos) << r.out;
  const Output bad = linnet_cmd("bench-engine --random-weights --backend cpu");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--random-weights needs --config"), std::string::npos) << bad.out;
}

// --profile: one more prefill and --gen decode steps with each op timed. Tiny has 2 layers,
// each with 4 products (qkv, o, gate_up, down), and the lm_head: 9 a step.
TEST(Bench, ProfileCountsEveryOpOfAPhase) {
  const fs::path d = fresh_dir("bench-profile");
  const Output r = linnet_cmd("bench --config tiny --random-weights --backend cpu --batch 2 --prompt 8 --gen 5 "
                              "--warmup 0 --repeats 1 --profile --json " + (d / "bench.json").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(outside the ops)"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(d / "bench.json"));
  for (const auto& [phase, steps] : {std::pair{"prefill", 1}, std::pair{"decode", 5}}) {
    const auto& p = j["profile"][phase];
    ASSERT_TRUE(p.is_object()) << j.dump(2);
    EXPECT_EQ(p["steps"], steps);
    std::map<std::string, int64_t> calls;
    double in_ops = 0;
    for (const auto& op : p["ops"]) {
      calls[op["op"].get<std::string>()] = op["calls"].get<int64_t>();
      in_ops += op["seconds"].get<double>();
    }
    EXPECT_EQ(calls["matmul"], 9 * steps) << phase;
    EXPECT_EQ(calls["attention_cache"], 2 * steps) << phase;
    EXPECT_EQ(calls["kv_write"], 2 * steps) << phase;
    EXPECT_GT(in_ops, 0) << phase;
    EXPECT_LE(in_ops, p["wall_s"].get<double>()) << phase << ": the ops took longer than the phase";
  }
}

// bench-sweep: configurations from a JSON plan in one process, each report written as
// <label>.json with its label, command, arguments and environment inside; a configuration that
// fails is reported as such and the next one runs; --only picks labels.
TEST(BenchSweep, RunsEveryConfigurationAndLabelsItsOwnReport) {
  const fs::path d = fresh_dir("bench-sweep");
  const std::string tiny = R"("--config", "tiny", "--random-weights", "--backend", "cpu")";
  {
    std::ofstream plan(d / "plan.json");
    plan << "[{\"label\": \"first\", \"args\": [" << tiny
         << R"(, "--batch", "2", "--prompt", "8", "--gen", "3", "--warmup", "0", "--repeats", "1"], "env": {"LINNET_CUDA_GRAPHS": "0"}},)"
         << "{\"label\": \"broken\", \"args\": [" << tiny << R"(, "--gen", "0"]},)"
         << "{\"label\": \"engine\", \"command\": \"bench-engine\", \"args\": [" << tiny
         << R"(, "--prompts", "4", "--prompt-min", "4", "--prompt-max", "8", "--max-new-tokens", "3", "--no-single", "--no-eval"]}])";
  }
  const Output r = linnet_cmd("bench-sweep --plan " + (d / "plan.json").string() + " --out " + (d / "out").string());
  EXPECT_EQ(r.code, 1) << r.out;  // one configuration failed
  for (const char* l : {"first", "broken", "engine"}) {
    EXPECT_NE(r.out.find(std::string("bench-sweep: begin ") + l), std::string::npos) << r.out;
    ASSERT_TRUE(fs::exists(d / "out" / (std::string(l) + ".json"))) << l << "\n" << r.out;
    const auto j = nlohmann::json::parse(slurp(d / "out" / (std::string(l) + ".json")));
    EXPECT_EQ(j["label"], l);
    EXPECT_EQ(j["status"], std::string(l) == "broken" ? "error" : "ok") << j.dump(2);
  }
  EXPECT_FALSE(fs::exists(d / "out" / "first.partial.json"));
  const auto first = nlohmann::json::parse(slurp(d / "out" / "first.json"));
  EXPECT_GT(first["decode"]["tokens_per_s"].get<double>(), 0);
  EXPECT_EQ(first["env"]["LINNET_CUDA_GRAPHS"], "0");
  EXPECT_EQ(first["command"], "bench");
  const auto broken = nlohmann::json::parse(slurp(d / "out" / "broken.json"));
  EXPECT_NE(broken["error"].get<std::string>().find("--gen"), std::string::npos) << broken.dump(2);
  EXPECT_FALSE(broken.contains("decode"));
  EXPECT_GT(nlohmann::json::parse(slurp(d / "out" / "engine.json"))["generate"]["batched_tok_s"].get<double>(), 0);

  fs::remove_all(d / "out");
  const Output only = linnet_cmd("bench-sweep --plan " + (d / "plan.json").string() + " --out " + (d / "out").string() +
                                 " --only engine");
  EXPECT_EQ(only.code, 0) << only.out;
  EXPECT_TRUE(fs::exists(d / "out" / "engine.json"));
  EXPECT_FALSE(fs::exists(d / "out" / "first.json"));
  const Output unknown = linnet_cmd("bench-sweep --plan " + (d / "plan.json").string() + " --out " + (d / "out").string() +
                                    " --only nope");
  EXPECT_EQ(unknown.code, 2) << unknown.out;
}
