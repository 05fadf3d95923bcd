// The CUDA backend's newer paths, each beside the one it replaces (docs/gpu.md, "Switches"):
// the split-K decode product and the panel-first wide product, attention_cache's prefetching
// kernel, the split logit rows, CUDA graphs of a step's launches, random weights made on the
// device, and matrices taken or stacked on the device. Every path is checked against its
// earlier twin (bit for bit where it keeps the arithmetic) and for batch invariance where it
// changes the bits. Written and compiled without a GPU: they skip without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "checkpoint/random_weights.h"
#include "core/backend.h"
#include "core/random_normal.h"
#include "layers/model.h"
#include "layers/parameters.h"

using namespace linnet;

#define NEED_GPU()                                                                    \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device is visible: " << cuda_status()

namespace {

// The CUDA switches set for one backend's making (read in its constructor), then put back.
class Switches {
 public:
  explicit Switches(std::map<std::string, std::string> vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
      setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ~Switches() {
    for (const auto& [k, v] : saved_) v ? (void)setenv(k.c_str(), v->c_str(), 1) : (void)unsetenv(k.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::unique_ptr<Backend> cuda_with(std::map<std::string, std::string> vars) {
  Switches s(std::move(vars));
  return make_cuda_backend(0);
}

Tensor random_tensor(Shape s, DType dt, uint32_t seed, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = nd(g) * scale;
  return Tensor::from_floats(std::move(s), v, dt);
}
bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}
// ‖a − b‖ / ‖b‖ over the entries finite in both; infinity where only one of a pair is NaN.
double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
      continue;
    }
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// x [n, K] · w [O, K]ᵀ + b on backend `be`, rows [0, n) of one upload.
Tensor product(Backend& be, const Tensor& hx, const Tensor& hw, const Tensor& hb, int64_t n) {
  const Tensor x = be.upload(hx).rows(0, n), w = be.upload_matrix(hw), b = be.upload(hb);
  Tensor out = be.empty({n, hw.dim(0)}, hx.dtype());
  be.matmul(x, w, &b, out);
  return be.to_host(out);
}

}  // namespace

// Both tensor-core families (auto: split-K up to 64 rows, 8 chains; tc4: the earlier 4-chain
// kernels) and both rasters: a row alone and among 1 … 255 others, bit for bit, across the
// split-K/wide edge at 64 rows. K: a tail past the last mma step (1000), empty chains (24),
// element loads (1003: rows not 16-byte aligned), Llama's 4096 and 14336 (down's).
TEST(CudaBatchInvariance, MatmulEveryFamilyRowAloneEqualsAmongOthers) {
  NEED_GPU();
  for (const char* family : {"auto", "tc4"})
    for (const char* raster : {"panel", "columns"}) {
      auto be = cuda_with({{"LINNET_CUDA_MATMUL", family}, {"LINNET_CUDA_RASTER", raster}});
      for (DType dt : {DType::bf16, DType::f16})
        for (int64_t K : {1000, 24, 1003, 4096, 14336}) {
          const int64_t O = 200;
          const Tensor hx = random_tensor({256, K}, dt, 1), hw = random_tensor({O, K}, dt, 2, 0.05f);
          const Tensor hb = random_tensor({O}, DType::f32, 3);
          const Tensor all = product(*be, hx, hw, hb, 256);
          for (int64_t n : {1, 2, 17, 64, 65, 100}) {
            const Tensor some = product(*be, hx, hw, hb, n);
            for (int64_t r : {int64_t{0}, n / 2, n - 1})
              EXPECT_TRUE(same_bytes(some.rows(r, r + 1), all.rows(r, r + 1)))
                  << family << " " << raster << " " << dtype_name(dt) << " K " << K << ": row " << r << " of " << n
                  << " against the same row of 256";
          }
        }
    }
}

// The raster is an order of blocks, not of arithmetic: panel-first and column-first wide
// products give the same bytes. The families agree with each other and with SIMT to f32
// rounding of the same bf16 products.
TEST(CudaPaths, MatmulRasterChangesNoBitAndFamiliesAgree) {
  NEED_GPU();
  const int64_t K = 4096, O = 1000;
  const Tensor hx = random_tensor({300, K}, DType::bf16, 4), hw = random_tensor({O, K}, DType::bf16, 5, 0.02f);
  const Tensor hb = random_tensor({O}, DType::f32, 6);
  auto panel = cuda_with({{"LINNET_CUDA_RASTER", "panel"}}), columns = cuda_with({{"LINNET_CUDA_RASTER", "columns"}});
  auto tc4 = cuda_with({{"LINNET_CUDA_MATMUL", "tc4"}}), simt = cuda_with({{"LINNET_CUDA_MATMUL", "simt"}});
  for (int64_t n : {1, 9, 64, 65, 300}) {
    const Tensor a = product(*panel, hx, hw, hb, n);
    EXPECT_TRUE(same_bytes(a, product(*columns, hx, hw, hb, n))) << n << " rows: panel vs columns";
    // Outputs in f32 to compare the sums, not their bf16 rounding.
    auto f32_out = [&](Backend& be) {
      const Tensor x = be.upload(hx).rows(0, n), w = be.upload_matrix(hw), b = be.upload(hb);
      Tensor out = be.empty({n, O}, DType::f32);
      be.matmul(x, w, &b, out);
      return be.to_host(out).to_floats();
    };
    const auto s = f32_out(*simt);
    EXPECT_LE(rel(f32_out(*panel), s), 1e-5) << n << " rows: auto against simt";
    EXPECT_LE(rel(f32_out(*tc4), s), 1e-5) << n << " rows: tc4 against simt";
  }
}

// The prefetching attention_cache kernel keeps the earlier kernel's arithmetic: the same bytes
// for decode tokens (one a block), grouped prefill tokens (row_run ≥ 2), missing pages, head
// dims 64, 128 and 72, bf16 and f16; f32 and head dims that are not a multiple of 8 take the
// earlier kernel under either switch.
TEST(CudaPaths, AttentionCachePrefetchEqualsTheEarlierKernel) {
  NEED_GPU();
  auto pf = cuda_with({{"LINNET_CUDA_ATTENTION", "prefetch"}}), v1 = cuda_with({{"LINNET_CUDA_ATTENTION", "v1"}});
  for (DType dt : {DType::bf16, DType::f16, DType::f32})
    for (int64_t D : {64, 128, 72, 20}) {
      const int64_t rows = 3, max_seq = 1024, page = 16;
      AttentionDims d{8, 2, D, max_seq, page};
      const Tensor hk = random_tensor({rows, d.kv_heads, max_seq, D}, dt, 7), hv = random_tensor({rows, d.kv_heads, max_seq, D}, dt, 8);
      const int64_t ppr = max_seq / page;
      std::vector<int64_t> table(static_cast<size_t>(rows * ppr));
      std::mt19937 g(9);
      for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int64_t>(i);
      std::shuffle(table.begin(), table.end(), g);
      table[5] = -1;  // a missing page: its keys are masked
      const Tensor htab = Tensor::from_ints({rows, ppr}, table);
      const std::vector<int64_t> pos = {0, 31, 32, 100, 255, 256, 700, 1023, 5, 6, 7, 8};
      std::vector<int64_t> row(pos.size());
      for (size_t i = 0; i < pos.size(); ++i) row[i] = i < 8 ? static_cast<int64_t>(i % rows) : 1;  // last 4: one row's run
      const Tensor hq = random_tensor({static_cast<int64_t>(pos.size()), d.qkv_width()}, dt, 10);
      for (int64_t row_run : {0, 4}) {
        auto run = [&](Backend& be) {
          AttentionDims dd = d;
          dd.span = 1024;
          dd.row_run = row_run;
          const int64_t n = static_cast<int64_t>(pos.size());
          Tensor out = be.empty({n, d.q_heads * D}, dt);
          be.fill_zero(out);
          be.attention_cache(be.upload(hq), dd, be.upload(Tensor::from_ints({n}, row)), be.upload(Tensor::from_ints({n}, pos)),
                             be.upload(htab), be.upload(hk), be.upload(hv), out);
          return be.to_host(out);
        };
        EXPECT_TRUE(same_bytes(run(*pf), run(*v1))) << dtype_name(dt) << " D " << D << " row_run " << row_run;
      }
    }
}

// LINNET_CUDA_CACHE_SPLIT: smaller pieces of a token's keys (more blocks for a decode step).
// Each value keeps batch invariance — a token among others, alone, and grouped as a row's run
// are the same bytes — and agrees with the default 256 within bf16's bound.
TEST(CudaPaths, CacheSplitKeepsBatchInvariance) {
  NEED_GPU();
  auto base = cuda_with({{"LINNET_CUDA_CACHE_SPLIT", "256"}});
  const int64_t rows = 3, max_seq = 8192, page = 16, D = 128;
  AttentionDims d{32, 8, D, max_seq, page};
  const Tensor hk = random_tensor({rows, d.kv_heads, max_seq, D}, DType::bf16, 21);
  const Tensor hv = random_tensor({rows, d.kv_heads, max_seq, D}, DType::bf16, 22);
  const int64_t ppr = max_seq / page;
  std::vector<int64_t> table(static_cast<size_t>(rows * ppr));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int64_t>(i);
  std::shuffle(table.begin(), table.end(), std::mt19937(23));
  const Tensor htab = Tensor::from_ints({rows, ppr}, table);
  const std::vector<int64_t> pos = {0, 63, 64, 2047, 2100, 4095, 4096, 8191, 3000, 3001, 3002, 3003};
  std::vector<int64_t> row(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) row[i] = i < 8 ? static_cast<int64_t>(i % rows) : 2;  // last 4: one row's run
  const Tensor hq = random_tensor({static_cast<int64_t>(pos.size()), d.qkv_width()}, DType::bf16, 24);
  auto run = [&](Backend& be, size_t first, size_t count, int64_t row_run) {
    AttentionDims dd = d;
    dd.span = max_seq;
    dd.row_run = row_run;
    const int64_t n = static_cast<int64_t>(count);
    std::vector<int64_t> p(pos.begin() + first, pos.begin() + first + count), r(row.begin() + first, row.begin() + first + count);
    Tensor out = be.empty({n, d.q_heads * D}, DType::bf16);
    be.attention_cache(be.upload(hq.rows(static_cast<int64_t>(first), static_cast<int64_t>(first + count))), dd,
                       be.upload(Tensor::from_ints({n}, r)), be.upload(Tensor::from_ints({n}, p)), be.upload(htab),
                       be.upload(hk), be.upload(hv), out);
    return be.to_host(out);
  };
  const Tensor want = run(*base, 0, pos.size(), 0);
  for (const char* split : {"128", "64", "32"}) {
    auto be = cuda_with({{"LINNET_CUDA_CACHE_SPLIT", split}});
    const Tensor all = run(*be, 0, pos.size(), 0), grouped = run(*be, 8, 4, 4);
    for (size_t i = 0; i < pos.size(); ++i) {
      const auto t = static_cast<int64_t>(i);
      EXPECT_TRUE(same_bytes(all.rows(t, t + 1), run(*be, i, 1, 0))) << "split " << split << " token " << i;
      if (i >= 8) {
        EXPECT_TRUE(same_bytes(all.rows(t, t + 1), grouped.rows(t - 8, t - 7))) << "split " << split << " run token " << i;
      }
    }
    const auto a = all.to_floats(), w = want.to_floats();
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      num += (a[i] - w[i]) * (a[i] - w[i]);
      den += w[i] * w[i];
    }
    EXPECT_LE(std::sqrt(num / den), 1e-2) << "split " << split << " against 256";
  }
  EXPECT_THROW(cuda_with({{"LINNET_CUDA_CACHE_SPLIT", "100"}}), Error);
}

// Split rows: argmax and Gumbel-max give the one-block kernel's (value, index) — ties to the
// lowest index, NaN never winning — and the softmax statistics agree to f32 rounding; a row's
// statistics are the same bytes alone and among others (the pieces depend on the vocab only).
TEST(CudaPaths, SplitRowsEqualOneBlockRows) {
  NEED_GPU();
  auto split = cuda_with({{"LINNET_CUDA_ROWS", "split"}}), block = cuda_with({{"LINNET_CUDA_ROWS", "block"}});
  for (int64_t V : {1, 100, 4096, 4097, 128256, 300000}) {
    const int64_t N = 5, valid = V > 10 ? V - 3 : V;
    Tensor h = random_tensor({N, V}, DType::bf16, 11, 3.f);
    auto* p = static_cast<uint16_t*>(h.data());
    if (V > 5000) {
      p[1 * V + 10] = p[1 * V + V / 2] = 0x4400;  // a tie at 512.0 in row 1: the lower index wins
      p[2 * V + 7] = 0x7fc0;                      // a NaN in row 2 never wins
      // Row 4 all NaN: its Σ exp is NaN in both forms (a split piece of NaN alone once read
      // as empty: max -inf, Σ 0 — review of the first pass).
      for (int64_t k = 0; k < V; ++k) p[4 * V + k] = 0x7fc0;
    }
    const std::vector<int64_t> targets = {0, 3, valid - 1, -1, valid + 1};
    auto run = [&](Backend& be, int64_t rows) {
      const Tensor l = be.upload(h).rows(0, rows);
      Tensor v = be.empty({rows}, DType::f32), i = be.empty({rows}, DType::i32), gv = be.empty({rows}, DType::f32),
             gi = be.empty({rows}, DType::i32), mx = be.empty({rows}, DType::f32), se = be.empty({rows}, DType::f32),
             tl = be.empty({rows}, DType::f32);
      be.argmax(l, valid, 1000, v, i);
      be.gumbel_max(l, valid, 1000, 3, 4, 5, 0.7f, gv, gi);
      be.logit_stats(l, valid, 1000,
                     be.upload(Tensor::from_ints({rows}, std::vector<int64_t>(targets.begin(), targets.begin() + rows))),
                     mx, se, tl);
      return be.to_host_many({v, i, gv, gi, mx, se, tl});
    };
    const auto a = run(*split, N), b = run(*block, N);
    for (int k : {0, 1, 2, 3, 6}) EXPECT_TRUE(same_bytes(a[k], b[k])) << "V " << V << " output " << k;
    EXPECT_TRUE(same_bytes(a[4], b[4])) << "V " << V << ": the max";
    EXPECT_LE(rel(a[5].to_floats(), b[5].to_floats()), 1e-6) << "V " << V << ": Σ exp";
    if (V > 5000) {
      EXPECT_TRUE(std::isnan(a[5].to_floats()[4])) << "V " << V << ": an all-NaN row's Σ exp (split)";
      EXPECT_TRUE(std::isnan(b[5].to_floats()[4])) << "V " << V << ": an all-NaN row's Σ exp (block)";
    }
    const auto one = run(*split, 1);
    EXPECT_TRUE(same_bytes(one[5], a[5].rows(0, 1))) << "V " << V << ": row 0's Σ exp alone and among " << N;
  }
}

namespace {
ModelConfig graph_config() {
  ModelConfig c;
  c.vocab = 1000;
  c.hidden = 256;
  c.heads = 4;
  c.kv_heads = 2;
  c.inner = 512;
  c.layers = 2;
  c.max_position = 1024;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000;
  c.dtype = DType::bf16;
  return c;
}
int64_t counter(const Backend& be, const std::string& name) {
  for (const auto& [k, v] : be.counters())
    if (k == name) return v;
  return -1;
}
}  // namespace

// A step's launches recorded and replayed as a CUDA graph give the bytes launching them one
// by one gives: decode steps across an attention split edge (256 positions: the graph changes
// with the split count), decode_rows with idle rows and changing batch, greedy generation; and
// the graphs are replayed (counters), not just captured.
TEST(CudaPaths, GraphsReplayTheSameBits) {
  NEED_GPU();
  const ModelConfig c = graph_config();
  RunOptions o;
  o.batch = 4;
  o.max_seq = 512;
  o.page_size = 16;
  const Generics g = bind_generics(c, o);
  auto run = [&](const char* graphs, int64_t* replays) {
    auto be = cuda_with({{"LINNET_CUDA_GRAPHS", graphs}});
    SingleCommunicator comm;
    RandomWeights w(5);
    Model m(c, g, w, *be, comm);
    std::vector<Tensor> out;
    std::vector<int64_t> prompt(4 * 240);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int64_t>((i * 37) % 1000);
    out.push_back(m.prefill(Tensor::from_ints({4, 240}, prompt), 0));
    for (int32_t pos = 240; pos < 270; ++pos)
      out.push_back(m.decode(Tensor::from_ints({4, 1}, {pos % 997, 1, 2, pos % 13}), pos));
    for (int step = 0; step < 12; ++step) {
      std::vector<int64_t> positions = {10 + step, step % 3 == 0 ? -1 : 20 + step, 5 + step, step % 2 ? -1 : 30 + step};
      out.push_back(m.decode_rows(Tensor::from_ints({4, 1}, {1, 2, 3, 4}), Tensor::from_ints({4}, positions, DType::i32)));
    }
    out.push_back(m.generate(Tensor::from_ints({4, 1}, {7, 8, 9, 10}), 300, 20));
    *replays = counter(*be, "graph_replays");
    return out;
  };
  int64_t replays_on = 0, replays_off = 0;
  const auto on = run("1", &replays_on), off = run("0", &replays_off);
  ASSERT_EQ(on.size(), off.size());
  for (size_t i = 0; i < on.size(); ++i) EXPECT_TRUE(same_bytes(on[i], off[i])) << "result " << i;
  EXPECT_GT(replays_on, 20) << "decode steps should replay their graphs";
  EXPECT_EQ(replays_off, 0);
}

// Random weights made on the device are random_values' (core/random_normal.h): in bf16 at
// most one unit in the last place apart, and nearly always equal; the padded rows of a
// last lm_head shard are zeros.
TEST(CudaPaths, RandomWeightsOnTheDevice) {
  NEED_GPU();
  auto be = make_cuda_backend(0);
  ModelConfig c = graph_config();
  c.vocab = 1001;  // two shards: the second's last row pads
  for (int64_t shards : {1, 2}) {
    RunOptions o;
    o.shards = shards;
    const Generics g = bind_generics(c, o);
    for (const auto& p : parameter_specs(c, g)) {
      if (p.full.rank() != 2) continue;
      for (int64_t s = 0; s < shards; ++s) {
        RandomWeights host(3, DType::bf16), device(3, DType::bf16, be.get());
        const Tensor want = host.read(p, s), got = device.read(p, s);
        ASSERT_EQ(got.device(), Device::cuda) << p.hf_name;
        const auto a = be->to_host(got), b = want;
        ASSERT_EQ(a.shape(), b.shape()) << p.hf_name;
        const auto* x = static_cast<const uint16_t*>(a.data());
        const auto* y = static_cast<const uint16_t*>(b.data());
        int64_t differ = 0;
        for (int64_t i = 0; i < a.numel(); ++i) {
          if (x[i] == y[i]) continue;
          ++differ;
          ASSERT_LE(std::abs(int(x[i]) - int(y[i])), 1) << p.hf_name << " shard " << s << " element " << i;
        }
        EXPECT_LE(differ, a.numel() / 1000 + 1) << p.hf_name << " shard " << s;
      }
    }
  }
}

// upload_matrix takes a matrix already on the device as it is (no copy), and stacks parts
// from the host or the device straight into one matrix.
TEST(CudaPaths, UploadMatrixTakesDeviceMatricesAndStacksParts) {
  NEED_GPU();
  auto be = make_cuda_backend(0);
  const Tensor a = random_tensor({3, 5}, DType::bf16, 12), b = random_tensor({4, 5}, DType::bf16, 13);
  const Tensor da = be->upload(a);
  EXPECT_EQ(be->upload_matrix(da).data(), da.data());
  const Tensor want = stack_rows({a, b});
  EXPECT_TRUE(same_bytes(be->to_host(be->upload_matrix(std::vector<Tensor>{a, b})), want));
  EXPECT_TRUE(same_bytes(be->to_host(be->upload_matrix(std::vector<Tensor>{da, be->upload(b)})), want));
  EXPECT_THROW(be->upload_matrix(std::vector<Tensor>{a, random_tensor({2, 6}, DType::bf16, 14)}), Error);
}

// LINNET_CUDA_FP8=cublaslt (Hopper only): FP8 layers with FP8 inputs multiplied on the FP8
// tensor cores through cuBLASLt — per-token × per-channel scales, and 1×128 × 128×128 blocks
// (llm-compressor's FP8_BLOCK). The products go there (counters); they agree with the exact
// path within f32's rounding of the same sum (f32 x; bf16 x: the exact path's x' = q·s is
// rounded to bf16); a row alone and among 36, 99 and 299 others (padded to 16-row multiples)
// gives the same bytes; a view of rows agrees with the exact view; on another GPU the switch is
// refused by name.
TEST(CudaPaths, Fp8ThroughCublasLtKeepsBatchInvariance) {
  NEED_GPU();
  if (cuda_device_description(0).find("sm_90") == std::string::npos) {
    try {
      cuda_with({{"LINNET_CUDA_FP8", "cublaslt"}});
      ADD_FAILURE() << "LINNET_CUDA_FP8=cublaslt was taken off Hopper";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sm_90"), std::string::npos) << e.what();
    }
    GTEST_SKIP() << "cuBLASLt's scaled FP8 products are Hopper's (sm_90): " << cuda_device_description(0);
  }
  auto exact = make_cuda_backend(0), lt = cuda_with({{"LINNET_CUDA_FP8", "cublaslt"}});
  const int64_t rows = 384, cols = 512, n = 300;
  std::mt19937 g(21);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  Tensor values = Tensor::empty({rows, cols}, DType::f8_e4m3);
  for (int64_t i = 0; i < rows * cols; ++i) {
    uint8_t b;
    do b = static_cast<uint8_t>(byte(g)); while ((b & 0x7f) == 0x7f);  // no NaN
    static_cast<uint8_t*>(values.data())[i] = b;
  }
  auto counted = [](Backend& be) {
    for (const auto& [k, v] : be.counters())
      if (k == "fp8_cublaslt_products") return v;
    return int64_t{-1};
  };
  for (const bool blocks : {false, true}) {
    WeightLayout layout = blocks ? WeightLayout::fp8_blocks(128, 128, "_scale") : WeightLayout::fp8_blocks(1, WeightLayout::kWhole, "_scale");
    layout.activations = {ActivationFormat::fp8, blocks ? int64_t{128} : int64_t{-1}};
    const int64_t scale_rows = blocks ? rows / 128 : rows, scale_cols = blocks ? cols / 128 : 1;
    std::vector<float> sv(static_cast<size_t>(scale_rows * scale_cols));
    for (auto& v : sv) v = scale(g);
    const std::vector<Backend::QuantizedPart> parts{{values, Tensor::from_floats({scale_rows, scale_cols}, sv), Tensor(), cols}};
    for (DType xt : {DType::f32, DType::bf16}) {
      const std::string what = str(blocks ? "128x128 blocks" : "per channel", ", x ", dtype_name(xt));
      const Tensor hx = random_tensor({n, cols}, xt, 22, 3.f), hb = random_tensor({rows}, xt, 23);
      auto run = [&](Backend& be, int64_t m, int64_t r0, int64_t r1, bool bias) {
        const Tensor w = be.upload_quantized_matrix(parts, layout).rows(r0, r1), x = be.upload(hx).rows(0, m);
        const Tensor b = be.upload(hb);
        Tensor out = be.empty({m, r1 - r0}, xt);
        be.matmul_rounded(x, layout.activations, nullptr, w, bias ? &b : nullptr, out);
        return be.to_host(out);
      };
      const int64_t before = counted(*lt);
      const Tensor all = run(*lt, n, 0, rows, true);
      EXPECT_GT(counted(*lt), before) << what << ": not taken through cuBLASLt";
      EXPECT_LE(rel(all.to_floats(), run(*exact, n, 0, rows, true).to_floats()), xt == DType::f32 ? 1e-5 : 1e-2) << what;
      for (const int64_t m : {int64_t{1}, int64_t{37}, int64_t{100}})
        EXPECT_TRUE(same_bytes(run(*lt, m, 0, rows, true), all.rows(0, m).clone())) << what << ": " << m << " rows differ from them among " << n;
      EXPECT_LE(rel(run(*lt, n, 128, 256, false).to_floats(), run(*exact, n, 128, 256, false).to_floats()),
                xt == DType::f32 ? 1e-5 : 1e-2)
          << what << ": a view of rows [128, 256)";
    }
  }
}

// Every switch refuses a value it does not know, by name; LINNET_CUDA_LEGACY=1 is every
// earlier path at once (and the results of the two agree to bf16's bound).
TEST(CudaPaths, SwitchesAreCheckedByName) {
  NEED_GPU();
  for (const char* var : {"LINNET_CUDA_MATMUL", "LINNET_CUDA_RASTER", "LINNET_CUDA_GRAPHS", "LINNET_CUDA_ATTENTION",
                          "LINNET_CUDA_ROWS", "LINNET_CUDA_LEGACY", "LINNET_CUDA_FP8"}) {
    try {
      cuda_with({{var, "sideways"}});
      ADD_FAILURE() << var << "=sideways was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(var) + "=sideways"), std::string::npos) << e.what();
    }
  }
  const Tensor hx = random_tensor({3, 512}, DType::bf16, 15), hw = random_tensor({64, 512}, DType::bf16, 16, 0.05f);
  const Tensor hb = random_tensor({64}, DType::f32, 17);
  auto now = make_cuda_backend(0), legacy = cuda_with({{"LINNET_CUDA_LEGACY", "1"}});
  EXPECT_LE(rel(product(*now, hx, hw, hb, 3).to_floats(), product(*legacy, hx, hw, hb, 3).to_floats()), 1e-2);
}
