// The argument checks every backend shares (core/op_checks.h): each names its backend, the op's
// label and the argument, and the CPU backend runs them before its own (that it computes in
// f32). The CUDA backend runs the same ones (tests/backend_ops_test.cpp on a GPU).
#include <gtest/gtest.h>

#include <string>

#include "core/backend.h"
#include "core/op_checks.h"

using namespace linnet;

namespace {

// The message of what f throws, or "" when it throws nothing.
template <class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Tensor f32(Shape s) { return Tensor::zeros(std::move(s), DType::f32); }
Tensor i32(Shape s) { return Tensor::zeros(std::move(s), DType::i32); }

}  // namespace

TEST(OpChecks, NameTheBackendTheOpAndTheArgument) {
  Tensor out = f32({2, 5});
  EXPECT_NE(thrown([&] { op_checks::matmul("test", f32({2, 3}), f32({4, 3}), nullptr, out); }).find("test matmul: out "),
            std::string::npos);
  const Tensor bias = f32({3});
  Tensor good = f32({2, 4});
  EXPECT_NE(thrown([&] { op_checks::matmul("test", f32({2, 3}), f32({4, 3}), &bias, good); }).find("bias "),
            std::string::npos);
  EXPECT_EQ(thrown([&] { op_checks::matmul("test", f32({2, 3}), f32({4, 3}), nullptr, good); }), "");
  // The label, not the function's name: rope_heads reports as "rope".
  Tensor x = f32({2, 8});
  EXPECT_NE(thrown([&] { op_checks::rope_heads("test", x, 0, 2, 4, i32({3}), f32({2}), 1.f); }).find("test rope: positions"),
            std::string::npos);
  EXPECT_NE(thrown([&] { op_checks::rope_heads("test", x, 1, 2, 4, i32({2}), f32({2}), 1.f); }).find("do not fit"),
            std::string::npos);
  // Index vectors are i32, one entry a row.
  Tensor emb = f32({2, 4});
  EXPECT_NE(thrown([&] { op_checks::embedding("test", f32({10, 4}), f32({2}), emb); }).find("ids "), std::string::npos);
  // Attention: dims, qkv width, cache shape and dtype, out.
  AttentionDims d{4, 2, 8, 32, 16};
  Tensor ck = f32({1, 2, 32, 8}), cv = f32({1, 2, 32, 8}), ao = f32({3, 32});
  const Tensor qkv = f32({3, d.qkv_width()});
  EXPECT_EQ(thrown([&] { op_checks::kv_write("test", qkv, d, i32({3}), ck, cv); }), "");
  AttentionDims bad = d;
  bad.q_heads = 3;
  EXPECT_NE(thrown([&] { op_checks::kv_write("test", f32({3, bad.qkv_width()}), bad, i32({3}), ck, cv); }).find("kv_heads"),
            std::string::npos);
  Tensor small = f32({1, 2, 16, 8});
  EXPECT_NE(thrown([&] { op_checks::kv_write("test", qkv, d, i32({3}), small, cv); }).find("cache_v"), std::string::npos);
  EXPECT_NE(thrown([&] {
              op_checks::attention_cache("test", qkv, d, i32({3}), i32({3}), f32({1, 2}), ck, cv, ao);
            }).find("table "),
            std::string::npos);
  // Vocab ops: valid within the row, one f32 result a row.
  Tensor v = f32({2}), idx = i32({2});
  EXPECT_NE(thrown([&] { op_checks::argmax("test", f32({2, 10}), 11, 0, v, idx); }).find("valid 11"), std::string::npos);
  EXPECT_NE(thrown([&] { op_checks::gumbel_max("test", f32({2, 10}), 10, 0, 1, 2, 0, 0.f, v, idx); }).find("temperature"),
            std::string::npos);
  // Experts: offsets from 0 to M, never decreasing.
  Tensor go = f32({4, 2});
  EXPECT_NE(thrown([&] { op_checks::grouped_matmul("test", f32({4, 3}), f32({6, 3}), {0, 3, 2, 4}, go); }).find("decrease"),
            std::string::npos);
}

TEST(OpChecks, TheCpuBackendRunsThemFirst) {
  auto cpu = make_cpu_backend();
  Tensor out = f32({2, 5});
  const std::string m = thrown([&] { cpu->matmul(f32({2, 3}), f32({4, 3}), nullptr, out); });
  EXPECT_NE(m.find("cpu backend matmul: out "), std::string::npos) << m;
  Tensor x = f32({2, 8});
  const std::string r = thrown([&] { cpu->rope_heads(x, 0, 2, 4, i32({3}), f32({2}), 1.f); });
  EXPECT_NE(r.find("cpu backend rope: positions"), std::string::npos) << r;
  // Then its own: the CPU computes in f32.
  Tensor bo = Tensor::zeros({2, 4}, DType::bf16);
  const std::string b = thrown([&] { cpu->matmul(Tensor::zeros({2, 3}, DType::bf16), f32({4, 3}), nullptr, bo); });
  EXPECT_NE(b.find("must be f32"), std::string::npos) << b;
}
