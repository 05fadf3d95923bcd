// The KV cache at fewer bytes (issue 37, --kv-cache-dtype bf16|f16|fp8): each model's error
// against transformers' f32 reference with a narrower cache (its bound), the invariants that a
// narrower cache must keep (a prompt's result does not depend on how it was cut into chunks),
// what the footprint counts, and the option's refusals. The ops themselves:
// CpuBackend.ANarrowerCacheRoundsKeysAndValuesAlikeOnEveryPath.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "architectures/hf_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "core/backend.h"
#include "layers/footprint.h"
#include "layers/generics.h"
#include "parallel/communicator.h"
#include "runtime/loader.h"

using namespace linnet;
using linnet::testutil::error_of;
namespace fs = std::filesystem;

namespace {

const fs::path kGolden = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden";

double rel(const Tensor& a, const Tensor& b) {
  const auto x = a.to_floats(), y = b.to_floats();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]), den += double(y[i]) * y[i];
  return std::sqrt(num / den);
}
Tensor step_of(const Tensor& all, int64_t i) {  // decode_logits [B, Steps, V] → step i [B, V]
  const int64_t b = all.dim(0), steps = all.dim(1), v = all.dim(2);
  const auto x = all.to_floats();
  std::vector<float> out;
  for (int64_t r = 0; r < b; ++r) out.insert(out.end(), x.begin() + (r * steps + i) * v, x.begin() + (r * steps + i + 1) * v);
  return Tensor::from_floats({b, v}, out);
}
Tensor column(const Tensor& tokens, int64_t i) {  // [B, Steps] → column i as [B, 1]
  const auto v = tokens.to_ints();
  std::vector<int64_t> c;
  for (int64_t r = 0; r < tokens.dim(0); ++r) c.push_back(v[r * tokens.dim(1) + i]);
  return Tensor::from_ints({tokens.dim(0), 1}, c);
}
Tensor columns(const Tensor& t, int64_t begin, int64_t end) {  // [B, S] → [B, end − begin]
  const auto v = t.to_ints();
  std::vector<int64_t> c;
  for (int64_t r = 0; r < t.dim(0); ++r)
    for (int64_t j = begin; j < end; ++j) c.push_back(v[r * t.dim(1) + j]);
  return Tensor::from_ints({t.dim(0), end - begin}, c);
}

LoadedModel load(const std::string& name, std::optional<DType> kv, Backend& be, Communicator& comm) {
  SafetensorsFile g((kGolden / name / "golden.safetensors").string());
  RunOptions o;
  o.batch = g.info("greedy_prompt").shape[0];
  o.max_seq = 64;
  o.page_size = 16;
  o.kv_cache_dtype = kv;
  return load_model((kGolden / name).string(), o, be, comm);
}

// The largest error of forward (the packed path) and of prefill + each decode step (the cache)
// against transformers' logits.
struct Errors {
  double forward = 0, decode = 0;
};
Errors errors(const std::string& name, std::optional<DType> kv) {
  SafetensorsFile g((kGolden / name / "golden.safetensors").string());
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  LoadedModel m = load(name, kv, *be, comm);
  Errors e;
  e.forward = rel(m.model->forward(g.read("forward_tokens")), g.read("forward_logits"));
  const Tensor prompt = g.read("greedy_prompt"), tokens = g.read("greedy_tokens"), ref = g.read("decode_logits");
  const int64_t s0 = prompt.dim(1), steps = tokens.dim(1);
  e.decode = rel(m.model->prefill(prompt, 0), step_of(ref, 0));
  for (int64_t i = 1; i < steps; ++i)
    e.decode = std::max(e.decode, rel(m.model->decode(column(tokens, i - 1), static_cast<int32_t>(s0 + i - 1)), step_of(ref, i)));
  return e;
}

}  // namespace

// Each narrower cache's error against transformers' f32 (or bf16) reference, beside the f32
// cache's: bf16 and f16 within the bf16 bound (2e-2; measured 1.4e-3 … 3.4e-3 and 1.8e-4 … 4.0e-4),
// FP8 within 1e-1 (measured 2.1e-2 … 5.8e-2: E4M3 keeps 3 mantissa bits, each key and value off by
// up to 1/16 of itself). docs/quantization.md lists the figures.
TEST(KvCacheDtype, NarrowerCachesStayWithinTheirBoundsAgainstTransformers) {
  for (const std::string name : {"mistral", "qwen3", "gemma2", "qwen3_bf16"}) {
    const Errors f32 = errors(name, std::nullopt), bf16 = errors(name, DType::bf16), f16 = errors(name, DType::f16),
                 fp8 = errors(name, DType::f8_e4m3);
    std::printf("kv cache %-12s f32 forward %.2e decode %.2e | bf16 %.2e %.2e | f16 %.2e %.2e | fp8 %.2e %.2e\n",
                name.c_str(), f32.forward, f32.decode, bf16.forward, bf16.decode, f16.forward, f16.decode, fp8.forward,
                fp8.decode);
    EXPECT_LT(bf16.forward, 2e-2) << name;
    EXPECT_LT(bf16.decode, 2e-2) << name;
    EXPECT_LT(f16.decode, 2e-2) << name;
    EXPECT_LT(fp8.forward, 1e-1) << name;
    EXPECT_LT(fp8.decode, 1e-1) << name;
    // The rounding shows (the cache is really narrower), more for FP8 than for bf16.
    if (name != "qwen3_bf16") {
      EXPECT_GT(bf16.decode, f32.decode) << name;
      EXPECT_GT(fp8.decode, bf16.decode) << name;
    }
  }
}

// A prompt cut into chunks gives the bits of the whole prompt, and decode after it too: the keys
// of the first chunk come back from the (narrower) cache, those of the call from qkv, rounded alike.
TEST(KvCacheDtype, ChunkedPrefillGivesTheBitsOfTheWholePrompt) {
  SafetensorsFile g((kGolden / "mistral" / "golden.safetensors").string());
  const Tensor prompt = g.read("greedy_prompt"), tokens = g.read("greedy_tokens");
  const int64_t s0 = prompt.dim(1);
  for (const DType kv : {DType::bf16, DType::f8_e4m3}) {
    auto be = make_cpu_backend();
    SingleCommunicator comm;
    LoadedModel whole = load("mistral", kv, *be, comm), cut = load("mistral", kv, *be, comm);
    std::vector<float> a = whole.model->prefill(prompt, 0).to_floats();
    cut.model->prefill(columns(prompt, 0, 2), 0);
    std::vector<float> b = cut.model->prefill(columns(prompt, 2, s0), 2).to_floats();
    EXPECT_EQ(a, b) << dtype_name(kv);
    for (int64_t i = 1; i < 4; ++i) {
      a = whole.model->decode(column(tokens, i - 1), static_cast<int32_t>(s0 + i - 1)).to_floats();
      b = cut.model->decode(column(tokens, i - 1), static_cast<int32_t>(s0 + i - 1)).to_floats();
      EXPECT_EQ(a, b) << dtype_name(kv) << " step " << i;
    }
  }
}

TEST(KvCacheDtype, TheFootprintCountsTheCachesBytesAndBadDtypesAreRefused) {
  const ModelConfig c = load_hf_config((kGolden / "mistral").string());
  RunOptions o;
  o.max_seq = 64;
  const Generics f32 = bind_generics(c, o);
  o.kv_cache_dtype = DType::f8_e4m3;
  const Generics fp8 = bind_generics(c, o);
  EXPECT_EQ(rank_footprint(c, fp8, DType::f32).kv_cache * 4, rank_footprint(c, f32, DType::f32).kv_cache);
  o.kv_cache_dtype = DType::bf16;
  EXPECT_EQ(rank_footprint(c, bind_generics(c, o), DType::f32).kv_cache * 2, rank_footprint(c, f32, DType::f32).kv_cache);
  // A dtype the backend does not keep a cache in: refused before any weight is read.
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  o.kv_cache_dtype = DType::i8;
  const std::string e = error_of([&] { load_model((kGolden / "mistral").string(), o, *be, comm); });
  EXPECT_NE(e.find("--kv-cache-dtype i8: the cpu backend keeps its KV cache in f32, bf16, f16 or fp8"), std::string::npos)
      << e;
}
