// The CUDA backend's own behaviour (memory, errors, the factory); its ops are compared with
// the CPU backend in backend_ops_test.cpp. Tests that need a GPU skip without one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "core/backend.h"

using namespace linnet;

#define NEED_GPU()                                                                    \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device is visible: " << cuda_status()

TEST(Cuda, DeviceCountIsSafeWithoutGpu) {
  const int n = cuda_device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(cuda_device_count(), n);  // asking again gives the same answer (no sticky error)
  if (n == 0) {
    EXPECT_THROW(make_backend("cuda"), Error);
    EXPECT_EQ(make_backend("auto")->device(), Device::cpu);
  } else {
    EXPECT_EQ(make_backend("auto")->device(), Device::cuda);
  }
}

TEST(Cuda, UploadRoundTrip) {
  NEED_GPU();
  auto be = make_cuda_backend(0);
  EXPECT_EQ(be->device(), Device::cuda);
  EXPECT_EQ(be->compute_dtype(DType::bf16), DType::bf16);
  EXPECT_EQ(be->compute_dtype(DType::f32), DType::f32);
  std::mt19937 g(1);
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64})
    for (int64_t n : {0, 1, 3, 1000, 1 << 20}) {
      Tensor h = Tensor::empty({n}, dt);
      auto* bytes = static_cast<unsigned char*>(h.data());
      for (size_t i = 0; i < h.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(g());
      Tensor d = be->upload(h);
      EXPECT_EQ(d.device(), Device::cuda);
      Tensor back = be->to_host(d);
      EXPECT_EQ(back.device(), Device::cpu);
      ASSERT_EQ(back.nbytes(), h.nbytes());
      EXPECT_EQ(std::memcmp(back.data(), h.data(), h.nbytes()), 0) << dtype_name(dt) << " n=" << n;
    }
  // A view (rows of a device tensor) copies back only its rows.
  Tensor h = Tensor::from_floats({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  Tensor d = be->upload(h);
  EXPECT_EQ(be->to_host(d.rows(1, 3)).to_floats(), (std::vector<float>{2, 3, 4, 5}));
  Tensor z = be->empty({3, 5}, DType::bf16);
  be->fill_zero(z);
  for (float v : be->to_host(z).to_floats()) EXPECT_EQ(v, 0.f);
}

TEST(Cuda, ManyAllocationsReuseThePool) {
  NEED_GPU();
  auto be = make_cuda_backend(0);
  // 2000 allocations of 64 MiB each would be 128 GiB without reuse.
  for (int i = 0; i < 2000; ++i) {
    Tensor t = be->empty({16 << 20}, DType::f32);
    if (i % 500 == 0) be->fill_zero(t);
  }
  be->synchronize();
}

TEST(Cuda, RejectsHostTensorsAndBadShapes) {
  NEED_GPU();
  auto be = make_cuda_backend(0);
  Tensor hx = Tensor::zeros({2, 4}, DType::f32), hw = Tensor::zeros({3, 4}, DType::f32);
  Tensor out = be->empty({2, 3}, DType::f32);
  EXPECT_THROW(be->matmul(hx, hw, nullptr, out), Error);
  Tensor x = be->upload(hx), w = be->upload(Tensor::zeros({3, 5}, DType::f32));
  EXPECT_THROW(be->matmul(x, w, nullptr, out), Error);
  EXPECT_THROW(be->gumbel_max(out, 3, 0, 1, 2, 0, 0.f, out, out), Error);
  EXPECT_THROW(make_cuda_backend(cuda_device_count()), Error);
}

// LINNET_CUDA_MATMUL: auto (tensor cores for 16-bit products) or simt; anything else is
// refused by name. Both agree with each other to bf16's bound.
TEST(Cuda, MatmulKernelChoice) {
  NEED_GPU();
  struct Env {
    explicit Env(const char* v) { setenv("LINNET_CUDA_MATMUL", v, 1); }
    ~Env() { unsetenv("LINNET_CUDA_MATMUL"); }
  };
  {
    Env e("tensor");
    try {
      make_cuda_backend(0);
      ADD_FAILURE() << "LINNET_CUDA_MATMUL=tensor was taken";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("LINNET_CUDA_MATMUL=tensor"), std::string::npos) << err.what();
    }
  }
  std::mt19937 g(9);
  std::normal_distribution<float> nd;
  std::vector<float> xv(100 * 512), wv(96 * 512);
  for (auto& v : xv) v = nd(g);
  for (auto& v : wv) v = nd(g) * 0.05f;
  auto product = [&](const char* kernel, int64_t n) {
    Env e(kernel);
    auto be = make_cuda_backend(0);
    const Tensor x = be->upload(Tensor::from_floats({100, 512}, xv, DType::bf16)).rows(0, n);
    const Tensor w = be->upload_matrix(Tensor::from_floats({96, 512}, wv, DType::bf16));
    Tensor out = be->empty({n, 96}, DType::f32);
    be->matmul(x, w, nullptr, out);
    return be->to_host(out).to_floats();
  };
  for (int64_t n : {7, 100}) {  // the narrow and the wide tensor-core kernel
    const auto tc = product("auto", n), simt = product("simt", n);
    double num = 0, den = 0;
    for (size_t i = 0; i < tc.size(); ++i) {
      num += (tc[i] - simt[i]) * (tc[i] - simt[i]);
      den += simt[i] * simt[i];
    }
    EXPECT_LE(std::sqrt(num / den), 1e-5) << n << " rows: bf16 products (exact in f32) summed two ways";
  }
}

// Batch invariance of the CUDA ops (docs/numerics.md): bitwise, not within a tolerance.
namespace {
Tensor random_tensor(Shape s, DType dt, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = nd(g);
  return Tensor::from_floats(std::move(s), v, dt);
}
bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}
}  // namespace

TEST(CudaBatchInvariance, MatmulRowAloneEqualsAmongOthers) {
  NEED_GPU();
  auto be = make_cuda_backend(0);
  // bf16 and f16 take the tensor-core kernels (narrow up to 64 rows, wide past it), f32 the
  // SIMT one. K: a tail past the last whole mma step (1000), chains that are empty or short
  // (24), rows not 16-byte aligned (1003: element loads), Llama's 4096.
  for (DType dt : {DType::bf16, DType::f16, DType::f32})
    for (int64_t K : {1000, 24, 1003, 4096}) {
      const int64_t O = 300;
      const Tensor x = be->upload(random_tensor({256, K}, dt, 1)), w = be->upload_matrix(random_tensor({O, K}, dt, 2));
      const Tensor b = be->upload(random_tensor({O}, DType::f32, 3));
      // Rows at every place in a tile (first, last, the next tile's first) alone, then among others.
      for (int64_t r : {0, 1, 15, 16, 31, 32, 33, 63, 64, 255}) {
        Tensor alone = be->empty({1, O}, dt);
        be->matmul(x.rows(r, r + 1), w, &b, alone);
        const Tensor want = be->to_host(alone);
        for (int64_t n : {2, 3, 17, 64, 65, 100, 256}) {
          if (n <= r) continue;
          Tensor out = be->empty({n, O}, dt);
          be->matmul(x.rows(0, n), w, &b, out);
          EXPECT_TRUE(same_bytes(be->to_host(out.rows(r, r + 1)), want))
              << dtype_name(dt) << " K " << K << " row " << r << " of " << n;
        }
      }
    }
}

TEST(CudaBatchInvariance, AttentionPackedRunAnywhereInTheCall) {
  NEED_GPU();
  auto be = make_cuda_backend(0);
  const AttentionDims d{4, 2, 64, 128, 16};
  const int64_t run = 45;  // the run under test: 45 tokens
  const Tensor mine = random_tensor({run, d.qkv_width()}, DType::bf16, 4);
  auto out_of_run = [&](int64_t before, int64_t after) {
    const int64_t n = before + run + after;
    Tensor qkv = Tensor::empty({n, d.qkv_width()}, DType::bf16);
    const Tensor others = random_tensor({n, d.qkv_width()}, DType::bf16, 5);
    std::memcpy(qkv.data(), others.data(), others.nbytes());
    std::memcpy(static_cast<char*>(qkv.data()) + before * mine.nbytes() / run, mine.data(), mine.nbytes());
    std::vector<int64_t> start(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) start[i] = i < before ? i / 7 * 7 : i < before + run ? before : before + run;
    Tensor out = be->empty({n, d.q_heads * d.head_dim}, DType::bf16);
    be->attention_packed(be->upload(qkv), d, be->upload(Tensor::from_ints({n}, start)), out);
    return be->to_host(out.rows(before, before + run));
  };
  const Tensor alone = out_of_run(0, 0);
  for (auto [before, after] : {std::pair<int64_t, int64_t>{1, 0}, {13, 5}, {40, 31}, {100, 3}})
    EXPECT_TRUE(same_bytes(out_of_run(before, after), alone)) << "run after " << before << " tokens, before " << after;
}

TEST(CudaBatchInvariance, AttentionCacheWhateverTheCallsSpan) {
  NEED_GPU();
  auto be = make_cuda_backend(0);
  const int64_t rows = 4, max_seq = 4096, page = 16;
  AttentionDims d{4, 2, 64, max_seq, page};
  const Tensor ck = be->upload(random_tensor({rows, d.kv_heads, max_seq, d.head_dim}, DType::bf16, 6));
  const Tensor cv = be->upload(random_tensor({rows, d.kv_heads, max_seq, d.head_dim}, DType::bf16, 7));
  std::vector<int64_t> table(static_cast<size_t>(rows * (max_seq / page)));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int64_t>(i);
  const Tensor tab = be->upload(Tensor::from_ints({rows, max_seq / page}, table));
  const Tensor q = random_tensor({8, d.qkv_width()}, DType::bf16, 8);
  // Tokens i = 0 … n−1 (q row i, cache row cache_row(i), their positions) in one call.
  auto cache_row = [&](int64_t i, int64_t first) { return (first + i) % rows; };
  auto call = [&](std::vector<int64_t> positions, int64_t row_run = 0, int64_t first = 0) {
    const int64_t n = static_cast<int64_t>(positions.size());
    d.row_run = row_run;  // ≥ 2: several tokens a block, walking their rows in turn
    std::vector<int64_t> r(static_cast<size_t>(n));
    int64_t span = 0;
    for (int64_t i = 0; i < n; ++i) {
      r[i] = cache_row(i, first);
      span = std::max(span, positions[i] + 1);
    }
    d.span = span;
    Tensor out = be->empty({n, d.q_heads * d.head_dim}, DType::bf16);
    be->attention_cache(be->upload(q.rows(first, first + n)), d, be->upload(Tensor::from_ints({n}, r)),
                        be->upload(Tensor::from_ints({n}, positions)), tab, ck, cv, out);
    return be->to_host(out);
  };
  // Token 0 (row 0) alone, then beside tokens reaching 1000 and 4000 positions.
  for (int64_t at : {300, 255, 256, 257}) {  // inside a split and at its edges
    const Tensor alone = call({at});
    EXPECT_TRUE(same_bytes(call({at, 999}).rows(0, 1), alone)) << "position " << at << " beside a token at 999";
    EXPECT_TRUE(same_bytes(call({at, 50, 3999, 7}).rows(0, 1), alone)) << "position " << at << " beside a token at 3999";
  }
  // Grouped (row_run ≥ 2: here G = 2, so 8 tokens a block): rows 0 1 2 3 0 1 — rows 0 and 1
  // walked for two tokens each, over the union of their ranges — and each token equal to
  // itself alone on its row (q row i, cache row i % 4).
  const std::vector<int64_t> at = {300, 50, 3999, 7, 20, 1300};
  const Tensor grouped = call(at, 2);
  for (int64_t i = 0; i < static_cast<int64_t>(at.size()); ++i)
    EXPECT_TRUE(same_bytes(grouped.rows(i, i + 1), call({at[i]}, 0, i))) << "token " << i << " grouped";
}

// Past 16K keys a token's pieces are 1/64 of its length; 300 such tokens of Llama-3-8B's
// heads need more partials than one workspace chunk holds (the backend then goes in chunks of
// tokens), and as one row's run they share K/V tiles four tokens a block, each with pieces of
// its own length. Each token equals itself alone, bit for bit, and the CPU within bf16's bound; a span
// too short for a token (a caller's broken contract) still reads all its keys.
TEST(CudaBatchInvariance, AttentionCacheLongContextsInChunks) {
  NEED_GPU();
  auto be = make_cuda_backend(0);
  auto cpu = make_cpu_backend();
  const int64_t max_seq = 20480, page = 16, n = 300;
  AttentionDims d{32, 8, 128, max_seq, page};
  const Tensor hk = random_tensor({1, d.kv_heads, max_seq, d.head_dim}, DType::bf16, 16);
  const Tensor hv = random_tensor({1, d.kv_heads, max_seq, d.head_dim}, DType::bf16, 17);
  const Tensor hq = random_tensor({n, d.qkv_width()}, DType::bf16, 18);
  std::vector<int64_t> table(static_cast<size_t>(max_seq / page)), pos(static_cast<size_t>(n));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int64_t>(i);
  // Lengths 18302 … 18601: pieces of 288 up to 18432 keys, 320 past it — tokens 130 and 131
  // differ and share a block.
  for (int64_t i = 0; i < n; ++i) pos[i] = 18301 + i;
  const Tensor htab = Tensor::from_ints({1, max_seq / page}, table);
  const Tensor ck = be->upload(hk), cv = be->upload(hv), tab = be->upload(htab);
  // The CPU backend computes in f32 only: its reference takes the same bf16 values widened.
  const Tensor fk = hk.to(DType::f32), fv = hv.to(DType::f32);
  auto run = [&](Backend& b, const Tensor& k, const Tensor& v, const Tensor& t, int64_t first, int64_t count,
                 int64_t span) {
    d.span = span;
    d.row_run = count;  // one row: a block's tokens share the K/V tiles (count 1: one a block)
    std::vector<int64_t> p(pos.begin() + first, pos.begin() + first + count);
    const DType dt = k.dtype();
    Tensor out = b.empty({count, d.q_heads * d.head_dim}, dt);
    b.attention_cache(b.upload(hq.rows(first, first + count).to(dt)), d, b.upload(Tensor::zeros({count}, DType::i32)),
                      b.upload(Tensor::from_ints({count}, p)), t, k, v, out);
    return b.to_host(out);
  };
  const Tensor all = run(*be, ck, cv, tab, 0, n, pos[n - 1] + 1);
  for (int64_t t : {0, 1, 130, 131, 251, 252, 253, 299}) {
    const Tensor alone = run(*be, ck, cv, tab, t, 1, pos[t] + 1);
    EXPECT_TRUE(same_bytes(all.rows(t, t + 1), alone)) << "token " << t << " of " << n;
    const auto want = run(*cpu, fk, fv, htab, t, 1, pos[t] + 1).to_floats(), got = alone.to_floats();
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      num += (got[i] - want[i]) * (got[i] - want[i]);
      den += want[i] * want[i];
    }
    EXPECT_LE(std::sqrt(num / den), 1e-2) << "token " << t << " against the CPU";
    if (t == 299) {  // span 300: two pieces' worth of splits for 18601 keys
      const auto short_span = run(*be, ck, cv, tab, t, 1, 300).to_floats();
      double e = 0;
      for (size_t i = 0; i < got.size(); ++i) e += (short_span[i] - got[i]) * (short_span[i] - got[i]);
      EXPECT_LE(std::sqrt(e / den), 1e-2) << "a span shorter than the token's context";
    }
  }
}
