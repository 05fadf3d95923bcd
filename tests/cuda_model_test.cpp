// The whole model on the CUDA backend against the same model on the CPU backend: the ops
// composed as the layers compose them (packed attention, cache attention through contiguous
// and shuffled page tables, greedy and sampled steps). Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <random>

#include "model_fixtures.h"

using namespace linnet;
using namespace linnet::testing;

namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.vocab = 1000;
  c.hidden = 256;
  c.heads = 4;
  c.kv_heads = 2;  // head dim 64, GQA 2
  c.inner = 512;
  c.layers = 2;
  c.max_position = 256;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000;
  c.dtype = DType::f32;
  return c;
}

struct Pair {
  ModelConfig config = small_config();
  Generics g;
  std::unique_ptr<Backend> cpu = make_cpu_backend(), gpu;
  SingleCommunicator comm_cpu, comm_gpu;
  std::unique_ptr<Model> on_cpu, on_gpu;
  explicit Pair(DType t, std::optional<DType> kv_cache = std::nullopt) {
    RunOptions o;
    o.batch = 4;
    o.max_seq = 128;
    o.page_size = 16;
    o.dtype = t;
    o.kv_cache_dtype = kv_cache;
    g = bind_generics(config, o);
    gpu = make_cuda_backend(0);
    RandomWeights w1(11), w2(11);
    on_cpu = std::make_unique<Model>(config, g, w1, *cpu, comm_cpu);
    on_gpu = std::make_unique<Model>(config, g, w2, *gpu, comm_gpu);
  }
};

std::vector<int64_t> random_ids(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int64_t> v(n);
  for (auto& x : v) x = static_cast<int64_t>(g() % 1000);
  return v;
}
Tensor i32(const std::vector<int64_t>& v) { return Tensor::from_ints({static_cast<int64_t>(v.size())}, v); }
Tensor column(const std::vector<int64_t>& v) { return Tensor::from_ints({static_cast<int64_t>(v.size()), 1}, v); }

void close(const Tensor& gpu, const Tensor& cpu, double tol, const std::string& what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const double e = rel_diff(gpu, cpu);
  std::printf("OPERR | %-16s | %-44s | %-18s | %-12s | %.2e | %.0e | %s\n", "model", what.c_str(),
              dtype_name(gpu.dtype()), "logits", e, tol, e <= tol ? "ok" : "FAIL");
  for (float v : gpu.to_floats()) ASSERT_TRUE(std::isfinite(v)) << what << ": non-finite logits";
  EXPECT_LE(e, tol) << what;
}

// Paged: prefill_paged of 4 rows × 50 tokens through a shuffled page table, then a
// decode_paged step with an idle row, on both backends.
void compare_paged(Pair& q, double tol, const std::string& what) {
  const int64_t ppr = 128 / 16;
  std::vector<int64_t> table(4 * ppr);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(5));
  Tensor tab = Tensor::from_ints({4, ppr}, table);
  std::vector<int64_t> flat, pos, rows, slots;
  auto pt = random_ids(4 * 50, 6);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t s = 0; s < 50; ++s) {
      flat.push_back(pt[r * 50 + s]);
      pos.push_back(s);
      rows.push_back(r);
      slots.push_back(table[r * ppr + s / 16] * 16 + s % 16);
    }
  Tensor last = i32({49, 99, 149, 199});
  close(q.on_gpu->prefill_paged(i32(flat), i32(pos), i32(rows), i32(slots), last, tab),
        q.on_cpu->prefill_paged(i32(flat), i32(pos), i32(rows), i32(slots), last, tab), tol, "prefill_paged 4x50" + what);
  Tensor step = column(random_ids(4, 7));
  close(q.on_gpu->decode_paged(step, i32({50, 50, -1, 50}), tab),
        q.on_cpu->decode_paged(step, i32({50, 50, -1, 50}), tab), tol, "decode_paged" + what);
}

}  // namespace

TEST(CudaModel, EntriesMatchTheCpuModel) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device is visible: " << cuda_status();
  for (DType t : {DType::f32, DType::bf16}) {
    const double tol = t == DType::f32 ? 1e-4 : 2e-2;  // docs/entries.md "Numbers"
    Pair p(t);
    // forward: packed attention over two rows of 37.
    Tensor toks = Tensor::from_ints({2, 37}, random_ids(74, 1));
    close(p.on_gpu->forward(toks), p.on_cpu->forward(toks), tol, "forward 2x37");
    // prefill then decode steps: cache attention, contiguous.
    Tensor prompt = Tensor::from_ints({4, 20}, random_ids(80, 2));
    close(p.on_gpu->prefill(prompt, 0), p.on_cpu->prefill(prompt, 0), tol, "prefill 4x20");
    for (int32_t s = 20; s < 23; ++s) {
      Tensor col = column(random_ids(4, 3 + s));
      close(p.on_gpu->decode(col, s), p.on_cpu->decode(col, s), tol, str("decode pos ", s));
    }
    // decode_rows with an idle row and uneven positions.
    Tensor next = column(random_ids(4, 40));
    close(p.on_gpu->decode_rows(next, i32({23, -1, 5, 23})), p.on_cpu->decode_rows(next, i32({23, -1, 5, 23})),
          tol, "decode_rows idle row");
    // Paged: prefill_paged then decode_paged through a shuffled table.
    Pair q(t);
    compare_paged(q, tol, "");
    // Tokens: greedy and sampled, exact in f32 (the top two logits are not near-tied here).
    if (t == DType::f32) {
      Pair r(t);
      Tensor start = column({3, 14, 15, 92});
      EXPECT_EQ(r.on_gpu->generate(start, 0, 6).to_ints(), r.on_cpu->generate(start, 0, 6).to_ints()) << "generate";
      Tensor key = Tensor::from_ints({2}, {12345, 678}, DType::i64);
      EXPECT_EQ(r.on_gpu->sample(start, 10, key, 0.9f, 6).to_ints(), r.on_cpu->sample(start, 10, key, 0.9f, 6).to_ints())
          << "sample";
    }
  }
}

// A mixture of experts (issue 30) on the CUDA backend against the CPU: Qwen3-MoE-shaped (a
// dense layer between two sparse ones, 16 experts of which 4 per token, renormalised):
// forward, prefill + decode and greedy tokens. (Tied routers: BackendOps.TopK.)
TEST(CudaModel, MixtureOfExpertsMatchesTheCpuModel) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device is visible: " << cuda_status();
  ModelConfig c = small_config();
  c.model_type = "qwen3_moe";
  c.layers = 3;
  c.experts = 16;
  c.experts_per_token = 4;
  c.expert_inner = 128;
  c.norm_topk_prob = true;
  c.layer_kinds = {LayerKind{false, 0, true}, LayerKind{}, LayerKind{false, 0, true}};
  for (DType t : {DType::f32, DType::bf16}) {
    const double tol = t == DType::f32 ? 1e-4 : 2e-2;
    RunOptions o;
    o.batch = 4;
    o.max_seq = 128;
    o.page_size = 16;
    o.dtype = t;
    const Generics g = bind_generics(c, o);
    auto cpu = make_cpu_backend(), gpu = make_cuda_backend(0);
    SingleCommunicator c1, c2;
    RandomWeights w1(13), w2(13);
    Model on_cpu(c, g, w1, *cpu, c1), on_gpu(c, g, w2, *gpu, c2);
    Tensor toks = Tensor::from_ints({2, 37}, random_ids(74, 21));
    close(on_gpu.forward(toks), on_cpu.forward(toks), tol, "moe forward 2x37");
    Tensor prompt = Tensor::from_ints({4, 20}, random_ids(80, 22));
    close(on_gpu.prefill(prompt, 0), on_cpu.prefill(prompt, 0), tol, "moe prefill 4x20");
    for (int32_t s = 20; s < 23; ++s) {
      Tensor col = column(random_ids(4, 30 + s));
      close(on_gpu.decode(col, s), on_cpu.decode(col, s), tol, str("moe decode pos ", s));
    }
    if (t == DType::f32) {
      Tensor start = column({3, 14, 15, 92});
      EXPECT_EQ(on_gpu.generate(start, 23, 6).to_ints(), on_cpu.generate(start, 23, 6).to_ints()) << "moe generate";
    }
  }
}

// A narrower KV cache (--kv-cache-dtype bf16, f16, fp8) on the CUDA backend against the same
// cache on the CPU (f32 models: the CPU computes in f32): forward (K and V rounded in the
// packed path), prefill + decode (written and read back through the cache), the paged path.
// Both round the same values, but a K or V value within f32 noise of a rounding midpoint may
// round either way (the two backends' products differ in their last bits), so the bound is
// looser than f32's: 1e-3 for bf16 and f16, 1e-2 for FP8 (one flip moves a value by 1/16).
TEST(CudaModel, NarrowerKvCachesMatchTheCpuModel) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device is visible: " << cuda_status();
  for (DType kv : {DType::bf16, DType::f16, DType::f8_e4m3}) {
    const double tol = kv == DType::f8_e4m3 ? 1e-2 : 1e-3;
    const std::string c = str(" cache ", dtype_name(kv));
    Pair p(DType::f32, kv);
    Tensor toks = Tensor::from_ints({2, 37}, random_ids(74, 1));
    close(p.on_gpu->forward(toks), p.on_cpu->forward(toks), tol, "forward 2x37" + c);
    Tensor prompt = Tensor::from_ints({4, 20}, random_ids(80, 2));
    close(p.on_gpu->prefill(prompt, 0), p.on_cpu->prefill(prompt, 0), tol, "prefill 4x20" + c);
    for (int32_t s = 20; s < 23; ++s) {
      Tensor col = column(random_ids(4, 3 + s));
      close(p.on_gpu->decode(col, s), p.on_cpu->decode(col, s), tol, str("decode pos ", s) + c);
    }
    Pair q(DType::f32, kv);
    compare_paged(q, tol, c);
  }
  // A bf16 model with an FP8 cache: the device rounds its bf16 K and V, the CPU its f32 ones, so
  // about one value in 32 lands on the other side of an FP8 midpoint: FP8's bound against
  // transformers (1e-1, KvCacheDtype.NarrowerCachesStayWithinTheirBoundsAgainstTransformers).
  Pair b(DType::bf16, DType::f8_e4m3);
  Tensor toks = Tensor::from_ints({2, 37}, random_ids(74, 1));
  close(b.on_gpu->forward(toks), b.on_cpu->forward(toks), 1e-1, "forward 2x37 bf16 cache f8_e4m3");
  Tensor prompt = Tensor::from_ints({4, 20}, random_ids(80, 2));
  close(b.on_gpu->prefill(prompt, 0), b.on_cpu->prefill(prompt, 0), 1e-1, "prefill 4x20 bf16 cache f8_e4m3");
}
