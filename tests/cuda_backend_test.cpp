// The CUDA backend's own behaviour (memory, errors, the factory); its ops are compared with
// the CPU backend in backend_ops_test.cpp. Tests that need a GPU skip without one.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

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
  for (DType dt : {DType::bf16, DType::f32}) {
    const int64_t K = 1000, O = 300;
    const Tensor x = be->upload(random_tensor({256, K}, dt, 1)), w = be->upload_matrix(random_tensor({O, K}, dt, 2));
    const Tensor b = be->upload(random_tensor({O}, DType::f32, 3));
    // Rows at every place in a tile (first, last, the next tile's first) alone, then among others.
    for (int64_t r : {0, 1, 31, 32, 33, 255}) {
      Tensor alone = be->empty({1, O}, dt);
      be->matmul(x.rows(r, r + 1), w, &b, alone);
      const Tensor want = be->to_host(alone);
      for (int64_t n : {2, 3, 17, 64, 100, 256}) {
        if (n <= r) continue;
        Tensor out = be->empty({n, O}, dt);
        be->matmul(x.rows(0, n), w, &b, out);
        EXPECT_TRUE(same_bytes(be->to_host(out.rows(r, r + 1)), want)) << dtype_name(dt) << " row " << r << " of " << n;
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
  const Tensor q = random_tensor({rows, d.qkv_width()}, DType::bf16, 8);
  // Token 0 (row 0) alone, then beside tokens reaching 1000 and 4000 positions.
  auto token0 = [&](std::vector<int64_t> positions) {
    const int64_t n = static_cast<int64_t>(positions.size());
    std::vector<int64_t> r(static_cast<size_t>(n));
    int64_t span = 0;
    for (int64_t i = 0; i < n; ++i) {
      r[i] = i % rows;
      span = std::max(span, positions[i] + 1);
    }
    d.span = span;
    Tensor out = be->empty({n, d.q_heads * d.head_dim}, DType::bf16);
    be->attention_cache(be->upload(q.rows(0, n)), d, be->upload(Tensor::from_ints({n}, r)),
                        be->upload(Tensor::from_ints({n}, positions)), tab, ck, cv, out);
    return be->to_host(out.rows(0, 1));
  };
  for (int64_t at : {300, 255, 256, 257}) {  // inside a split and at its edges
    const Tensor alone = token0({at});
    EXPECT_TRUE(same_bytes(token0({at, 999}), alone)) << "position " << at << " beside a token at 999";
    EXPECT_TRUE(same_bytes(token0({at, 50, 3999, 7}), alone)) << "position " << at << " beside a token at 3999";
  }
}
