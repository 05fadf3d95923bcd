// The integer dot products (issue 37, LINNET_CPU_DOT=int8): x quantized per block of 32 as
// llama.cpp's Q8_0 is, int4 (compressed-tensors, GPTQ, AWQ), MXFP4 and int8 (W8A8, W8A16, GPTQ
// 8-bit) weights multiplied by it in exact integers. Checked: the activations' quantization, the
// same bits from every kernel and row count (batch invariance), the product of the quantized
// activations within f32 accumulation, the distance to the f32 path within the rounding of x,
// and whole models under the switch (a mixture of experts and W8A8 among them) against
// transformers, within a bound of its own (docs/quantization.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "checkpoint/safetensors.h"
#include "core/backend.h"
#include "core/cpu/packed_matmul.h"
#include "model_fixtures.h"
#include "parallel/communicator.h"
#include "run_self.h"
#include "runtime/loader.h"

using namespace linnet;
namespace fs = std::filesystem;

namespace {

// A [rows, cols] matrix of 4-bit codes (one a byte) or int8 values, its scales and zero points
// per row and group (MXFP4: exponents, groups of 32, no zero points; int8: none), and its
// dequantized f32 values.
enum class Kind { int4, mxfp4, int8 };
struct Nibbles {
  Kind kind = Kind::int4;
  bool mx = false;
  int64_t rows = 0, cols = 0, group = 0;
  std::vector<uint8_t> q, zeros;
  std::vector<float> scales;
  std::vector<float> dequantized;
  int64_t groups() const { return (cols + group - 1) / group; }
  int64_t padded() const { return (rows + cpu::kPanel - 1) / cpu::kPanel * cpu::kPanel; }
};

float e2m1(int code) {
  static const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  return (code & 8) ? -mag[code & 7] : mag[code & 7];
}

Nibbles random_nibbles(Kind kind, int64_t rows, int64_t cols, int64_t group, bool symmetric, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 15), exp(110, 130), byte(-128, 127);
  std::normal_distribution<float> nd;
  const bool mx = kind == Kind::mxfp4;
  Nibbles w;
  w.kind = kind, w.mx = mx, w.rows = rows, w.cols = cols, w.group = mx ? 32 : group;
  const int64_t g = w.groups();
  w.q.resize(static_cast<size_t>(rows * cols));
  w.zeros.resize(static_cast<size_t>(rows * g));
  w.scales.resize(static_cast<size_t>(rows * g));
  w.dequantized.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * g; ++i) {
    w.zeros[i] = static_cast<uint8_t>(mx ? exp(rng) : symmetric ? 8 : code(rng));
    w.scales[i] = mx ? std::ldexp(1.0f, w.zeros[i] - 127) : std::fabs(nd(rng)) * 0.01f + 1e-4f;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c), b = static_cast<size_t>(r * g + c / w.group);
      if (kind == Kind::int8) {  // (every row has a −128: vpmaddubsw's sign trick would fail on it)
        const int v = c == r % cols ? -128 : byte(rng);
        w.q[i] = static_cast<uint8_t>(static_cast<int8_t>(v));
        w.dequantized[i] = static_cast<float>(v) * w.scales[b];
        continue;
      }
      w.q[i] = static_cast<uint8_t>(code(rng));
      w.dequantized[i] = mx ? e2m1(w.q[i]) * w.scales[b]
                            : (static_cast<float>(w.q[i]) - static_cast<float>(w.zeros[b])) * w.scales[b];
    }
  return w;
}

std::vector<uint8_t> pack_dot(const Nibbles& w) {
  std::vector<uint8_t> out(w.kind == Kind::int8 ? cpu::packed_fp8_bytes(w.rows, w.cols, w.group)
                           : w.mx               ? cpu::packed_mxfp4_bytes(w.rows, w.cols, 32)
                                                : cpu::packed_int4_bytes(w.rows, w.cols, w.group));
  if (w.kind == Kind::int8)
    cpu::pack_int8_dot(reinterpret_cast<const int8_t*>(w.q.data()), w.scales.data(), w.rows, w.cols, w.group,
                       out.data());
  else if (w.mx)
    cpu::pack_mxfp4_dot(w.q.data(), w.zeros.data(), w.rows, w.cols, 32, out.data());
  else
    cpu::pack_int4_dot(w.q.data(), w.scales.data(), w.zeros.data(), w.rows, w.cols, w.group, out.data());
  return out;
}

void dot(const Nibbles& w, const std::vector<uint8_t>& packed, const float* x, int64_t n, int64_t row0, int64_t o,
         float* out, const char* kernel = nullptr) {
  if (w.kind == Kind::int8)
    cpu::packed_matmul_int8_dot(x, n, w.cols, packed.data(), w.padded(), w.group, row0, o, out, kernel);
  else if (w.mx)
    cpu::packed_matmul_mxfp4_dot(x, n, w.cols, packed.data(), w.padded(), 32, row0, o, out, kernel);
  else
    cpu::packed_matmul_int4_dot(x, n, w.cols, packed.data(), w.padded(), w.group, row0, o, out, kernel);
}

// Activations of a model's scale, with a block of zeros and one with an outlier.
std::vector<float> activations(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<size_t>(n * k));
  for (auto& v : x) v = nd(rng);
  for (int64_t t = 0; t < 32 && k >= 64; ++t) x[static_cast<size_t>(32 + t)] = 0;
  if (n > 1) x[static_cast<size_t>(k + 5)] = 40.0f;
  return x;
}

struct Case {
  Kind kind;
  int64_t cols, group;
  bool symmetric;
};
const Case kCases[] = {{Kind::int4, 64, 32, true},   {Kind::int4, 256, 128, false}, {Kind::int4, 96, 96, true},
                       {Kind::int4, 128, 64, false}, {Kind::mxfp4, 64, 32, true},   {Kind::mxfp4, 160, 32, true},
                       {Kind::int8, 64, 32, true},   {Kind::int8, 256, 128, true},  {Kind::int8, 96, 96, true}};

std::string what(const Case& c) {
  return str(c.kind == Kind::int8 ? "int8" : c.kind == Kind::mxfp4 ? "mxfp4" : "int4", " k ", c.cols, " group ", c.group,
             c.symmetric ? " symmetric" : " asymmetric");
}

}  // namespace

TEST(IntDot, ActivationsAreQ8_0Blocks) {
  const int64_t n = 3, k = 96;
  const std::vector<float> x = activations(n, k, 1);
  cpu::Q8Rows q;
  cpu::quantize_rows_q8(x.data(), n, k, q);
  ASSERT_EQ(q.q.size(), static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < k / 32; ++b) {
      const size_t at = static_cast<size_t>(r * (k / 32) + b);
      float amax = 0;
      int32_t sum = 0;
      for (int64_t t = 0; t < 32; ++t) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * k + b * 32 + t)]));
      EXPECT_EQ(q.d[at], amax / 127.0f) << r << " " << b;
      for (int64_t t = 0; t < 32; ++t) {
        const size_t i = static_cast<size_t>(r * k + b * 32 + t);
        const float d = q.d[at];
        EXPECT_EQ(q.q[i], d == 0 ? 0 : static_cast<int>(std::nearbyint(x[i] * (1.0f / d)))) << i;
        EXPECT_LE(std::fabs(q.q[i] * d - x[i]), d / 2 * 1.0001f) << i;  // within half a step
        if (std::fabs(x[i]) == amax && amax > 0) {
          EXPECT_EQ(std::abs(q.q[i]), 127) << i;
        }
        sum += q.q[i];
      }
      EXPECT_EQ(q.sum[at], sum);
    }
  EXPECT_EQ(q.d[1], 0.0f);  // the block of zeros
  EXPECT_THROW(cpu::quantize_rows_q8(x.data(), 1, 40, q), Error);
}

// The kernels this CPU has, the best first: VNNI's (vpdpbusd) where the CPU has it, then AVX2's,
// then the scalar one. EveryKernelAndRowCountGiveTheSameBits compares them all.
TEST(IntDot, TheCpusKernelsAreListedBestFirst) {
  __builtin_cpu_init();
  const auto names = cpu::int_dot_kernels();
  auto listed = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  EXPECT_EQ(listed("avx512vnni"), avx2 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl"));
  EXPECT_EQ(listed("avxvnni"), avx2 && __builtin_cpu_supports("avxvnni"));
  EXPECT_EQ(listed("avx2"), avx2);
  EXPECT_EQ(std::string(names.back()), "scalar");
  if (listed("avx512vnni")) EXPECT_EQ(std::string(names.front()), "avx512vnni");
}

// A row alone, among 2 … 13 others, in any tile, by every kernel: the same bits; and a view of
// rows across panels (a fused matrix's part) gives those rows of the whole.
TEST(IntDot, EveryKernelAndRowCountGiveTheSameBits) {
  for (const Case& c : kCases) {
    const int64_t o = 45, n = 13;
    const Nibbles w = random_nibbles(c.kind, o, c.cols, c.group, c.symmetric, static_cast<uint32_t>(c.cols + c.group));
    const std::vector<uint8_t> packed = pack_dot(w);
    const std::vector<float> x = activations(n, c.cols, 7);
    std::vector<float> all(static_cast<size_t>(n * o));
    dot(w, packed, x.data(), n, 0, o, all.data());
    for (const char* kernel : cpu::int_dot_kernels())
      for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, n})
        for (int64_t r0 = 0; r0 + m <= n; r0 += m) {
          std::vector<float> got(static_cast<size_t>(m * o));
          dot(w, packed, x.data() + r0 * c.cols, m, 0, o, got.data(), kernel);
          ASSERT_EQ(0, std::memcmp(got.data(), all.data() + r0 * o, got.size() * sizeof(float)))
              << what(c) << ": kernel " << kernel << ", rows " << r0 << " … " << r0 + m - 1;
        }
    const int64_t row0 = 7, rows = 29;
    std::vector<float> view(static_cast<size_t>(n * rows));
    dot(w, packed, x.data(), n, row0, rows, view.data());
    for (int64_t r = 0; r < n; ++r)
      ASSERT_EQ(0, std::memcmp(view.data() + r * rows, all.data() + r * o + row0, rows * sizeof(float))) << what(c);
  }
}

// The result is the product of the dequantized weights and the quantized activations (q · d)
// within f32 accumulation; against the f32 activations, within half a quantization step of each
// block times its weights' magnitudes.
TEST(IntDot, IsTheProductOfTheQuantizedActivations) {
  for (const Case& c : kCases) {
    const int64_t o = 40, n = 4, k = c.cols;
    const Nibbles w = random_nibbles(c.kind, o, k, c.group, c.symmetric, static_cast<uint32_t>(3 * k + c.group));
    const std::vector<uint8_t> packed = pack_dot(w);
    std::vector<float> unpacked(static_cast<size_t>(o * k));
    if (c.kind == Kind::int8)
      cpu::unpack_rows_int8_dot_f32(packed.data(), w.padded(), k, w.group, 0, o, unpacked.data());
    else if (c.kind == Kind::mxfp4)
      cpu::unpack_rows_mxfp4_dot_f32(packed.data(), w.padded(), k, 32, 0, o, unpacked.data());
    else
      cpu::unpack_rows_int4_dot_f32(packed.data(), w.padded(), k, w.group, 0, o, unpacked.data());
    ASSERT_EQ(unpacked, w.dequantized) << what(c);
    const std::vector<float> x = activations(n, k, 11);
    cpu::Q8Rows q;
    cpu::quantize_rows_q8(x.data(), n, k, q);
    std::vector<float> got(static_cast<size_t>(n * o));
    dot(w, packed, x.data(), n, 0, o, got.data());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < o; ++j) {
        double of_q = 0, of_x = 0, magnitude = 0, step = 0;
        for (int64_t t = 0; t < k; ++t) {
          const double wt = w.dequantized[static_cast<size_t>(j * k + t)];
          const double dq = q.d[static_cast<size_t>(r * (k / 32) + t / 32)];
          of_q += wt * q.q[static_cast<size_t>(r * k + t)] * dq;
          of_x += wt * x[static_cast<size_t>(r * k + t)];
          magnitude += std::fabs(wt * x[static_cast<size_t>(r * k + t)]);
          step += std::fabs(wt) * dq / 2;
        }
        const double g = got[static_cast<size_t>(r * o + j)];
        EXPECT_NEAR(g, of_q, 1e-5 * magnitude + 1e-30) << what(c) << " row " << r << " out " << j;
        EXPECT_LE(std::fabs(g - of_x), step * 1.0001 + 1e-5 * magnitude) << what(c) << " row " << r << " out " << j;
      }
  }
  // Blocks of 32 only: another width is refused by name (the backend keeps those on the f32 path).
  const Nibbles w = random_nibbles(Kind::int4, 8, 48, 16, true, 1);
  EXPECT_FALSE(cpu::int_dot_fits(48, 16));
  EXPECT_FALSE(cpu::int_dot_fits(64, 16));
  EXPECT_TRUE(cpu::int_dot_fits(64, 64));
  std::vector<uint8_t> buf(cpu::packed_int4_bytes(8, 48, 16));
  EXPECT_THROW(cpu::pack_int4_dot(w.q.data(), w.scales.data(), w.zeros.data(), 8, 48, 16, buf.data()), Error);
}

namespace {

// The checkpoint's parts of a Nibbles matrix: compressed-tensors' int4 words (eight a word, low
// bits first; zero points eight rows a word) or MXFP4's bytes (two a byte) and exponents.
Backend::QuantizedPart checkpoint_part(const Nibbles& w) {
  const int64_t g = w.groups();
  if (w.kind == Kind::int8) {  // compressed-tensors' int-quantized: I8 [out, in], a scale a row and group
    Tensor q = Tensor::empty({w.rows, w.cols}, DType::i8);
    std::memcpy(q.data(), w.q.data(), w.q.size());
    return {q, Tensor::from_floats({w.rows, g}, w.scales), Tensor(), w.cols, Tensor(), Tensor()};
  }
  if (w.mx) {
    Tensor bytes = Tensor::zeros({w.rows, w.cols / 2}, DType::u8), exps = Tensor::empty({w.rows, g}, DType::f8_e8m0);
    for (int64_t i = 0; i < w.rows * w.cols; ++i) bytes.ptr<uint8_t>()[i / 2] |= static_cast<uint8_t>(w.q[i] << (4 * (i % 2)));
    std::memcpy(exps.data(), w.zeros.data(), w.zeros.size());
    return {bytes, exps, Tensor(), w.cols, Tensor(), Tensor()};
  }
  Tensor words = Tensor::zeros({w.rows, w.cols / 8}, DType::i32), scales = Tensor::from_floats({w.rows, g}, w.scales),
         zeros = Tensor::zeros({(w.rows + 7) / 8, g}, DType::i32);
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c)
      words.ptr<uint32_t>()[r * (w.cols / 8) + c / 8] |= static_cast<uint32_t>(w.q[r * w.cols + c]) << (4 * (c % 8));
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t b = 0; b < g; ++b) zeros.ptr<uint32_t>()[(r / 8) * g + b] |= static_cast<uint32_t>(w.zeros[r * g + b]) << (4 * (r % 8));
  bool symmetric = true;
  for (uint8_t z : w.zeros) symmetric &= z == 8;
  return {words, scales, symmetric ? Tensor() : zeros, w.cols, Tensor(), Tensor()};
}

// Under the switch: the backend packs 4-bit matrices of whole blocks of 32 for the integer path
// and multiplies them by it (the kernel's bits through matmul, whole and on a view); a group
// of 16 stays on the f32 path (the dense product's bits). Whole models against transformers
// within the switch's own bound, and not at the f32 path's bits.
void expect_the_integer_path() {
  auto be = make_cpu_backend();
  for (const Case& c : kCases) {
    const int64_t o = 40, n = 5;
    const Nibbles w = random_nibbles(c.kind, o, c.cols, c.group, c.symmetric, 99);
    const Tensor m = be->upload_quantized_matrix({checkpoint_part(w)}, c.kind == Kind::int8    ? WeightLayout::int8_groups(c.group)
                                                                       : c.kind == Kind::mxfp4 ? WeightLayout::mxfp4_blocks()
                                                                                               : WeightLayout::int4_groups(c.group, c.symmetric));
    const std::vector<float> xv = activations(n, c.cols, 5);
    const Tensor x = Tensor::from_floats({n, c.cols}, xv);
    Tensor got = Tensor::empty({n, o}, DType::f32), view = Tensor::empty({n, 20}, DType::f32);
    be->matmul(x, m, nullptr, got);
    be->matmul(x, m.rows(10, 30), nullptr, view);
    std::vector<float> want(static_cast<size_t>(n * o));
    dot(w, pack_dot(w), xv.data(), n, 0, o, want.data());
    EXPECT_EQ(got.to_floats(), want) << what(c);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < 20; ++j) EXPECT_EQ(view.to_floats()[r * 20 + j], want[r * o + 10 + j]) << what(c);
  }
  const Nibbles w16 = random_nibbles(Kind::int4, 8, 64, 16, true, 4);
  const Tensor m = be->upload_quantized_matrix({checkpoint_part(w16)}, WeightLayout::int4_groups(16, true));
  const Tensor x = Tensor::from_floats({2, 64}, activations(2, 64, 3));
  Tensor got = Tensor::empty({2, 8}, DType::f32), want = Tensor::empty({2, 8}, DType::f32);
  be->matmul(x, m, nullptr, got);
  be->matmul(x, be->upload_matrix(Tensor::from_floats({8, 64}, w16.dequantized)), nullptr, want);
  EXPECT_EQ(got.to_floats(), want.to_floats());

  const fs::path golden = fs::path(LINNET_SOURCE_DIR) / "tests/fixtures/golden";
  for (const char* fixture : {"awq_f16", "ct_mxfp4_f32", "ct_mxfp4_qwen3_moe_f32", "ct_w8a8_f32"}) {
    SafetensorsFile g((golden / fixture / "golden.safetensors").string());
    SingleCommunicator comm;
    RunOptions ro;
    ro.batch = 4;
    ro.max_seq = 64;
    LoadedModel lm = load_model((golden / fixture).string(), ro, *be, comm);
    const double e = linnet::testing::rel_diff(lm.model->forward(g.read("forward_tokens")), g.read("forward_logits"));
    std::printf("LINNET_CPU_DOT=int8 %s: forward logits %.2e from transformers'\n", fixture, e);
    EXPECT_LT(e, 5e-2) << fixture;
    EXPECT_GT(e, 1e-5) << fixture << ": the f32 path's bits, not the integer path's";
  }
}

}  // namespace

TEST(IntDot, TheSwitchTakesTheIntegerPathThroughTheBackend) {
  const char* v = std::getenv("LINNET_CPU_DOT");
  if (v && std::string(v) == "int8") return expect_the_integer_path();
  auto [code, out] =
      testutil::run_self("LINNET_CPU_DOT", "int8", "IntDot.TheSwitchTakesTheIntegerPathThroughTheBackend");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
  for (size_t at = out.find("LINNET_CPU_DOT=int8 "); at != std::string::npos; at = out.find("LINNET_CPU_DOT=int8 ", at + 1))
    std::printf("%s\n", out.substr(at, out.find('\n', at) - at).c_str());
}

// LINNET_CPU_PREFETCH=0 (read once: the kernels leave the weights to the hardware prefetcher)
// moves no value: the integer path (every format of kCases) and the f32 path on bf16 weights give
// the same bits either way. The child prints its bits; the parent compares them with its own.
namespace {
std::string product_bits() {
  uint64_t h = 1469598103934665603ull;
  auto fold = [&](const std::vector<float>& v) {
    for (float f : v) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      h = (h ^ u) * 1099511628211ull;
    }
  };
  for (const Case& c : kCases) {
    const int64_t o = 45, n = 3;
    const Nibbles w = random_nibbles(c.kind, o, c.cols, c.group, c.symmetric, static_cast<uint32_t>(c.cols + 5));
    const std::vector<uint8_t> packed = pack_dot(w);
    const std::vector<float> x = activations(n, c.cols, 11);
    std::vector<float> out(static_cast<size_t>(n * o));
    dot(w, packed, x.data(), n, 0, o, out.data());
    fold(out);
  }
  auto be = make_cpu_backend();
  const Tensor w = be->upload_matrix(Tensor::from_floats({96, 4096}, activations(96, 4096, 12), DType::bf16));
  for (int64_t n : {int64_t{1}, int64_t{5}}) {
    Tensor y = Tensor::empty({n, 96}, DType::f32);
    be->matmul(Tensor::from_floats({n, 4096}, activations(n, 4096, 13)), w, nullptr, y);
    fold(y.to_floats());
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}
}  // namespace

TEST(CpuPrefetch, ChildPrintsItsBits) {
  if (!std::getenv("LINNET_CPU_PREFETCH")) GTEST_SKIP() << "run by CpuPrefetch.TheSwitchChangesNoBit";
  EXPECT_FALSE(cpu::cpu_prefetch());
  std::printf("BITS %s\n", product_bits().c_str());
}

TEST(CpuPrefetch, TheSwitchChangesNoBit) {
  if (std::getenv("LINNET_CPU_PREFETCH")) GTEST_SKIP() << "the parent runs with the default";
  EXPECT_TRUE(cpu::cpu_prefetch());
  const auto [rc, out] = testutil::run_self("LINNET_CPU_PREFETCH", "0", "CpuPrefetch.ChildPrintsItsBits");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("BITS " + product_bits()), std::string::npos) << out;
}
