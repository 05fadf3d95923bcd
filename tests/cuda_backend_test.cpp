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
