// Tiny models for the tests: random weights from a config, on the CPU backend.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/random_weights.h"
#include "runtime/write_checkpoint.h"
#include "core/backend.h"
#include "layers/model.h"

namespace linnet::testing {

// A tiny GQA config: 4 heads over 2 KV heads, head dim 8, 2 layers.
inline ModelConfig tiny_config() {
  ModelConfig c;
  c.vocab = 97;
  c.hidden = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.inner = 48;
  c.layers = 2;
  c.max_position = 64;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000;
  c.dtype = DType::f32;
  return c;
}

struct TinyModel {
  ModelConfig config;
  Generics g;
  std::unique_ptr<Backend> backend = make_cpu_backend();
  SingleCommunicator comm;
  std::unique_ptr<Model> model;

  explicit TinyModel(ModelConfig c = tiny_config(), RunOptions o = {4, 32, 1, 8, std::nullopt}, uint64_t seed = 7)
      : config(c), g(bind_generics(c, o)) {
    RandomWeights w(seed);
    model = std::make_unique<Model>(config, g, w, *backend, comm);
  }
  Model* operator->() { return model.get(); }
};

inline Tensor ids(Shape s, std::vector<int64_t> v) { return Tensor::from_ints(std::move(s), v, DType::i32); }

inline double rel_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_floats(), y = b.to_floats();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    den += double(y[i]) * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// A checkpoint directory in this build's test cache (a fresh build, fresh data), made once by
// `make` and shared by tests that ctest may run at the same time: written aside, then renamed
// into place in one step.
inline std::filesystem::path shared_checkpoint(const std::string& name,
                                               const std::function<void(const std::string&)>& make) {
  namespace fs = std::filesystem;
  const fs::path cache = LINNET_TEST_CACHE;
  fs::create_directories(cache);
  const fs::path dir = cache / name;
  if (fs::exists(dir / "model.safetensors")) return dir;
  const fs::path aside = cache / (name + ".tmp" + std::to_string(getpid()));
  fs::remove_all(aside);
  make(aside.string());
  std::error_code ec;
  fs::rename(aside, dir, ec);  // fails if another test got there first: theirs is as good
  if (ec) fs::remove_all(aside);
  return dir;
}

// Random weights (6 heads: Shards 2 and 3) with the byte-level BPE tokenizer of the fixtures
// (vocab 1398), so that text prompts work: what the generate and job-file tests run.
// A new, empty folder linnet_<test suite>_<name>_<pid> under the temp dir (left for a look
// after a failure; each test removes it when done).
inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string suite = test ? test->test_suite_name() : "test";
  std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("linnet_" + suite + "_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}
inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
// The JSON values of a .jsonl file, empty lines skipped.
inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// A random f32 checkpoint of c (seed) with the fixtures' byte-level BPE tokenizer (vocab 1398),
// made once per test cache as `name`; `more` adds files to its folder (a chat template).
inline std::filesystem::path random_checkpoint_with_tokenizer(
    const std::string& name, const ModelConfig& c, uint64_t seed,
    const std::function<void(const std::filesystem::path&)>& more = {}) {
  return shared_checkpoint(name, [&](const std::string& d) {
    write_random_checkpoint(c, d, DType::f32, seed);
    const std::filesystem::path fx = std::filesystem::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval/model";
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      std::filesystem::copy_file(fx / f, std::filesystem::path(d) / f);
    if (more) more(d);
  });
}

// A small random Llama with the fixtures' tokenizer: vocab 1398, H 48, 6 heads, MaxSeq 256,
// EOS 1 — what the generate, job-file and chat tests run.
inline ModelConfig tiny_text_config() {
  ModelConfig c = tiny_config();
  c.vocab = 1398;
  c.hidden = 48;
  c.heads = 6;
  c.kv_heads = 6;
  c.inner = 96;
  c.max_position = 256;
  c.eos_token_ids = {1};
  return c;
}

inline std::filesystem::path tiny_text_model() {
  return random_checkpoint_with_tokenizer("linnet_gen_tiny", tiny_text_config(), 21);
}

// tiny_text_config at H 256, 4 layers: slow enough that a run at one row at a time takes a few
// seconds and a step's barriers dominate (the progress and threads tests).
inline std::filesystem::path small_text_model() {
  ModelConfig c = tiny_text_config();
  c.hidden = 256;
  c.heads = 8;
  c.kv_heads = 8;
  c.inner = 768;
  c.layers = 4;
  return random_checkpoint_with_tokenizer("linnet_progress_small", c, 35);
}

// stories15M's files (stories15M.bin, tokenizer.model, tokenizer.bin), as
// scripts/fetch-stories15M finds them (a models folder beside the checkout, $LINNET_MODELS),
// else downloaded into this build's test cache. `dir` is empty when none works, and `why_not` says why. A failed
// download is remembered for 30 minutes, so the tests that need the model skip at once.
struct Stories15M {
  std::filesystem::path dir;
  std::string why_not;
};
inline const Stories15M& stories15m_files() {
  static const Stories15M found = [] {
    namespace fs = std::filesystem;
    const fs::path cache = fs::path(LINNET_TEST_CACHE) / "models";
    const fs::path failed = cache / "stories15M.unavailable";
    fs::create_directories(cache);
    std::error_code ec;
    const auto age = fs::file_time_type::clock::now() - fs::last_write_time(failed, ec);
    if (!ec && age < std::chrono::minutes(30)) {
      std::ifstream in(failed);
      return Stories15M{{}, std::string(std::istreambuf_iterator<char>(in), {})};
    }
    const std::string cmd = "bash '" + std::string(LINNET_SOURCE_DIR) + "/scripts/fetch-stories15M' '" + (cache / "stories15M").string() +
                            "' 2>'" + failed.string() + ".err'";
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      while (std::fgets(buf, sizeof buf, p)) out += buf;
      if (::pclose(p) == 0 && !out.empty()) {
        out.erase(out.find_last_not_of('\n') + 1);
        return Stories15M{out, ""};
      }
    }
    std::ifstream err(failed.string() + ".err");
    std::string why = "stories15M not found (see scripts/fetch-stories15M; set LINNET_MODELS) and not downloadable: " +
                      std::string(std::istreambuf_iterator<char>(err), {});
    std::ofstream(failed) << why;
    return Stories15M{{}, why};
  }();
  return found;
}

// stories15M imported into a Hugging Face checkpoint (empty when its files are not to be had).
inline std::filesystem::path stories15m_checkpoint() {
  const Stories15M& s = stories15m_files();
  if (s.dir.empty()) return {};
  return shared_checkpoint("linnet_stories15M_hf",
                           [&](const std::string& d) { import_llama2c((s.dir / "stories15M.bin").string(), d); });
}

// GTEST_SKIP() with the reason unless stories15M is to be had.
#define LINNET_NEED_STORIES15M()                                                                      \
  do {                                                                                                \
    if (::linnet::testing::stories15m_files().dir.empty()) GTEST_SKIP() << ::linnet::testing::stories15m_files().why_not; \
  } while (0)

}  // namespace linnet::testing
