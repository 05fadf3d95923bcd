// Conformance with Hugging Face transformers (SPEC §6): every golden fixture made by
// tools/golden/make_golden.py, on one rank in-process and on two ranks (Shards 2) through
// `mpirun linnet run`. Errors are ‖out − ref‖/‖ref‖; bounds f32 1e-4, bf16 2e-2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/loader.h"
#include "checkpoint/safetensors.h"
#include "model_fixtures.h"
#include "mpi_run.h"

using namespace linnet;
using namespace linnet::testing;
namespace fs = std::filesystem;

namespace {

const fs::path kGolden = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden";

std::vector<std::string> cases() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(kGolden))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Greedy tokens must match up to the first step whose top-two gap is within the dtype's
// rounding (the fixture records each step's gap); after a legitimate flip they may differ.
void expect_greedy(const Tensor& got, const SafetensorsFile& g, double tie_gap, const std::string& name) {
  const auto want = g.read("greedy_tokens").to_ints(), have = got.to_ints();
  const auto gap = g.read("greedy_top2_gap").to_floats();
  const int64_t steps = g.info("greedy_tokens").shape[1];
  for (size_t b = 0; b * steps < want.size(); ++b)
    for (int64_t i = 0; i < steps; ++i) {
      if (gap[b * steps + i] < tie_gap) break;
      ASSERT_EQ(have[b * steps + i], want[b * steps + i]) << name << " row " << b << " step " << i;
    }
}

struct Inputs {
  Tensor head, last;  // greedy prompt without / with only its last token
  int32_t last_pos;
};
Inputs greedy_inputs(const SafetensorsFile& g) {
  const Tensor prompt = g.read("greedy_prompt");
  const int64_t b = prompt.dim(0), s = prompt.dim(1);
  const auto v = prompt.to_ints();
  std::vector<int64_t> head, last;
  for (int64_t r = 0; r < b; ++r) {
    head.insert(head.end(), v.begin() + r * s, v.begin() + r * s + s - 1);
    last.push_back(v[r * s + s - 1]);
  }
  return {Tensor::from_ints({b, s - 1}, head), Tensor::from_ints({b, 1}, last), static_cast<int32_t>(s - 1)};
}

}  // namespace

// LINNET_TEST_BACKEND=cuda runs the fixtures on the CUDA backend (scripts/gpu-check does);
// default cpu. A backend that cannot be had skips the tests with its reason.
std::string test_backend() {
  const char* b = std::getenv("LINNET_TEST_BACKEND");
  return b ? b : "cpu";
}
#define NEED_TEST_BACKEND()                                                                             \
  if (test_backend() == "cuda" && cuda_device_count() == 0)                                             \
  GTEST_SKIP() << "LINNET_TEST_BACKEND=cuda, but no CUDA device is visible: " << cuda_status()

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, OneRankMatchesTransformers) {
  const fs::path dir = kGolden / GetParam();
  NEED_TEST_BACKEND();
  SafetensorsFile g((dir / "golden.safetensors").string());
  auto backend = make_backend(test_backend());
  SingleCommunicator comm;
  RunOptions o;
  o.batch = g.info("greedy_prompt").shape[0];
  LoadedModel m = load_model(dir.string(), o, *backend, comm);
  const bool bf16 = m.generics.t == DType::bf16;
  const double bound = bf16 ? 2e-2 : 1e-4;
  const double e_fwd = rel_diff(m.model->forward(g.read("forward_tokens")), g.read("forward_logits"));
  const Tensor t = g.read("packed_tokens"), p = g.read("packed_positions"), s = g.read("packed_segments");
  const double e_lp = rel_diff(m.model->log_probs_packed(t, p, s, g.read("packed_targets")), g.read("log_probs"));
  const float loss = m.model->loss_packed(t, p, s, g.read("packed_targets"), g.read("packed_weights"));
  const double e_loss = std::abs(loss - g.read("loss").to_floats()[0]) / std::abs(g.read("loss").to_floats()[0]);
  const double e_hidden = rel_diff(m.model->hidden_packed(t, p, s), g.read("hidden"));
  EXPECT_LT(e_fwd, bound);
  EXPECT_LT(e_lp, bound);
  EXPECT_LT(e_loss, bound);
  EXPECT_LT(e_hidden, bound);
  const Inputs in = greedy_inputs(g);
  m.model->prefill(in.head, 0);
  const int64_t steps = g.info("greedy_tokens").shape[1];
  expect_greedy(m.model->generate(in.last, in.last_pos, steps), g, bf16 ? 0.05 : 1e-3, GetParam());
  std::printf("conformance %-12s %s forward %.2e  log_probs %.2e  loss %.2e  hidden %.2e  (bound %.0e)\n",
              GetParam().c_str(), backend->name().c_str(), e_fwd, e_lp, e_loss, e_hidden, bound);
}

TEST_P(Conformance, TwoRanksMatchTransformers) {
  NEED_TEST_BACKEND();
  const fs::path dir = kGolden / GetParam();
  const fs::path work = fs::temp_directory_path() / ("linnet_conformance_" + GetParam());
  fs::create_directories(work);
  SafetensorsFile g((dir / "golden.safetensors").string());
  const Inputs in = greedy_inputs(g);
  std::vector<std::pair<std::string, Tensor>> inputs;
  for (const auto& name : g.names()) inputs.emplace_back(name, g.read(name));
  inputs.emplace_back("greedy_head", in.head);
  inputs.emplace_back("greedy_last", in.last);
  save_safetensors((work / "in.safetensors").string(), inputs);
  const int64_t steps = g.info("greedy_tokens").shape[1];
  std::ofstream((work / "calls.json").string()) << R"([
    {"entry": "forward", "args": {"tokens": "forward_tokens"}, "outputs": ["forward_logits"]},
    {"entry": "log_probs_packed", "args": {"tokens": "packed_tokens", "positions": "packed_positions",
      "segments": "packed_segments", "targets": "packed_targets"}, "outputs": ["log_probs"]},
    {"entry": "loss_packed", "args": {"tokens": "packed_tokens", "positions": "packed_positions",
      "segments": "packed_segments", "targets": "packed_targets", "weights": "packed_weights"}, "outputs": ["loss"]},
    {"entry": "hidden_packed", "args": {"tokens": "packed_tokens", "positions": "packed_positions",
      "segments": "packed_segments"}, "outputs": ["hidden"]},
    {"entry": "prefill", "args": {"tokens": "greedy_head", "pos": 0}},
    {"entry": "generate", "args": {"token": "greedy_last", "pos": )"
                                                   << in.last_pos << R"(}, "generics": {"Steps": )" << steps
                                                   << R"(}, "outputs": ["greedy_tokens"]}])";
  const auto r = mpi_run(2, LINNET_BINARY,
                         {"run", "--checkpoint", dir.string(), "--calls", (work / "calls.json").string(), "--inputs",
                          (work / "in.safetensors").string(), "--outputs", (work / "out.safetensors").string(),
                          "--backend", test_backend(), "--batch", std::to_string(in.head.dim(0))},
                         120);
  if (r.exit_code == 127 || r.output.find("mpirun not found") != std::string::npos) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  SafetensorsFile out((work / "out.safetensors").string());
  const bool bf16 = out.info("forward_logits").dtype == DType::bf16;
  const double bound = bf16 ? 2e-2 : 1e-4;
  for (const char* name : {"forward_logits", "log_probs", "loss", "hidden"})
    EXPECT_LT(rel_diff(out.read(name), g.read(name)), bound) << name;
  expect_greedy(out.read("greedy_tokens"), g, bf16 ? 0.05 : 1e-3, GetParam());
  fs::remove_all(work);
}

INSTANTIATE_TEST_SUITE_P(Golden, Conformance, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param; });
