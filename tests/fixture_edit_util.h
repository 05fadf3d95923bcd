// What the quantized formats' tests share (tests/fp8_test.cpp, int4_test.cpp, int8_test.cpp,
// gptq_test.cpp): a golden fixture copied with its config.json edited and tensors replaced or
// added, and the error a load gives; a matrix's ParamSpec; every kernel's product against the
// f32 path's on the dequantized matrix.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/safetensors.h"
#include "core/cpu/packed_matmul.h"
#include "layers/parameters.h"
#include "checkpoint_test_util.h"
#include "core/backend.h"
#include "parallel/communicator.h"
#include "runtime/loader.h"

namespace linnet::testutil {

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `fixture` copied into `d` with config.json edited and tensors replaced or added (name → tensor).
inline void edited_fixture(const std::filesystem::path& fixture, const ScratchDir& d,
                           const std::function<void(nlohmann::json&)>& config,
                           const std::map<std::string, Tensor>& replace = {}) {
  nlohmann::json j = nlohmann::json::parse(read_text(fixture / "config.json"));
  config(j);
  std::ofstream(d / "config.json") << j.dump(2);
  SafetensorsFile f((fixture / "model.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, Tensor> added = replace;
  for (const auto& n : f.names()) {
    auto it = replace.find(n);
    tensors.emplace_back(n, it != replace.end() ? it->second : f.read(n));
    added.erase(n);
  }
  for (const auto& [n, t] : added) tensors.emplace_back(n, t);
  save_safetensors(d / "model.safetensors", tensors);
}

// The error loading `d` on one rank of the CPU backend gives ("" and a test failure if none).
inline std::string load_error(const ScratchDir& d) {
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  return error_of([&] { load_model(d.str(), RunOptions{}, *be, comm); });
}

// A matrix parameter `name` of shape `full`, split and stored as given.
inline ParamSpec matrix_spec(const std::string& name, Shape full, Split split, int64_t per_shard,
                             const WeightLayout& layout) {
  ParamSpec p;
  p.hf_name = name;
  p.card_name = name;
  p.full = std::move(full);
  p.split = split;
  p.per_shard = per_shard;
  p.layout = layout;
  return p;
}

// For every kernel and each batch size of x's rows, `product(n, kernel, out)` (a quantized
// product of rows [row0, row0 + o) of a matrix, into out [n, o]) has the bits of the f32 path's
// product of x with `dense` (the dequantized matrix, uploaded). The scalar kernel is slow: its
// bits are checked up to 3 rows.
inline void expect_every_kernel_gives_the_dense_product(
    const Tensor& x, const Tensor& dense, int64_t row0, int64_t o,
    const std::function<void(int64_t n, const char* kernel, float* out)>& product, const std::string& what) {
  const int64_t k = x.dim(1);
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{12}, int64_t{13}, x.dim(0)})
    for (const char* kernel : cpu::packed_matmul_kernels()) {
      if (std::string(kernel) == "scalar" && n > 3) continue;
      Tensor got = Tensor::empty({n, o}, DType::f32), want = Tensor::empty({n, o}, DType::f32);
      product(n, kernel, got.ptr<float>());
      cpu::packed_matmul(x.ptr<float>(), n, k, dense.storage()->data, DType::f32, row0, o, want.ptr<float>(), kernel);
      ASSERT_EQ(got.to_floats(), want.to_floats()) << what << ": kernel " << kernel << " n " << n;
    }
}

}  // namespace linnet::testutil
