// Tests of bad checkpoints (tests/fp8_test.cpp, tests/int4_test.cpp): a golden fixture copied
// with its config.json edited and tensors replaced or added, and the error a load gives.
#pragma once
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/safetensors.h"
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

}  // namespace linnet::testutil
