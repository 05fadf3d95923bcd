// Every op of core/backend.h on every backend other than the CPU, against the CPU backend
// (in the spirit of llama.cpp's test-backend-ops). For each op: several shapes (odd sizes,
// N = 1, ~1000-token attention, GQA 1/2/4, shuffled page tables, skipped rows) and dtypes
// (f32 / bf16 / f16 activations, f32 / bf16 weights, f16 ones in the products). The CPU computes in f32, so it is given the
// f32 widening of exactly the values the device sees. Each device run starts from outputs
// poisoned with NaN (so unwritten elements show), runs twice (the two must agree bit for bit:
// a difference is a race), and is compared by ‖out − ref‖ / ‖ref‖ against a per-op bound;
// indices (argmax, Gumbel-max) must match exactly. Each comparison prints one line
//   OPERR | <op> | <case> | <dtypes> | <output> | <err> | <bound> | <ok|FAIL>
// (err is the normalized error, or the count of differing elements for exact checks)
// that scripts/gpu-check gathers into its summary. Without a GPU every test is skipped but one:
// each op of core/backend_op_list.h must have a test here (EveryListedOpHasACase).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <set>

#include "core/backend.h"

using namespace linnet;

namespace {

// Made once and kept for the whole process (never destroyed: tearing a device backend down
// after the CUDA runtime has unloaded at exit is not worth the risk in a test binary).
const std::vector<std::unique_ptr<Backend>>& device_backends() {
  static auto* v = [] {
    auto* list = new std::vector<std::unique_ptr<Backend>>;
    if (cuda_device_count() > 0) list->push_back(make_cuda_backend(0));
    return list;
  }();
  return *v;
}

#define NEED_DEVICE_BACKENDS(var)                                                            \
  const auto& var = device_backends();                                                            \
  if (var.empty()) GTEST_SKIP() << "no CUDA device is visible: " << cuda_status()            \
                                 << " (nothing to compare with the CPU backend; run scripts/gpu-check on a GPU machine)"

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Values representable in dtype t (so the CPU's f32 copy holds exactly what the device sees).
std::vector<float> in_dtype(std::vector<float> v, DType t) {
  for (auto& x : v) x = round_to(t, x);
  return v;
}

std::string dts(DType a, DType w) { return str("act=", dtype_name(a), ",w=", dtype_name(w)); }

// The bound for outputs held in dtype t (f32: tight; 16-bit: the storage rounding dominates).
double bound_for(DType t, double f32_bound = 1e-5) { return t == DType::f32 ? f32_bound : 1e-2; }

// A device (or CPU) tensor from host values; the CPU reference gets f32.
Tensor put(Backend& be, bool ref, Shape s, const std::vector<float>& v, DType dt) {
  return be.upload(Tensor::from_floats(std::move(s), v, ref ? DType::f32 : dt));
}
Tensor put_ints(Backend& be, Shape s, const std::vector<int64_t>& v) {
  return be.upload(Tensor::from_ints(std::move(s), v, DType::i32));
}
// An output filled with NaN (floats) or 0x7f7f7f7f (ints) before the op runs.
Tensor poison(Backend& be, bool ref, Shape s, DType dt) {
  const DType t = ref && is_float(dt) ? DType::f32 : dt;
  Tensor h = Tensor::empty(std::move(s), t);
  if (is_float(t)) {
    std::vector<float> nan(static_cast<size_t>(h.numel()), std::nanf(""));
    h = Tensor::from_floats(h.shape(), nan, t);
  } else {
    std::memset(h.data(), 0x7f, h.nbytes());
  }
  return be.upload(h);
}

// The ops each test checks, registered beside it (OPS_TEST); check_op refuses an op its test
// did not register, and EveryListedOpHasACase one of core/backend_op_list.h that none did.
std::set<std::string>& covered_ops() {
  static std::set<std::string> ops;
  return ops;
}
bool cover(std::initializer_list<const char*> ops) {
  for (const char* op : ops) covered_ops().insert(op);
  return true;
}
#define OPS_TEST(Name, ...)                                         \
  [[maybe_unused]] const bool kCovers##Name = cover({__VA_ARGS__}); \
  TEST(BackendOps, Name)

using Outputs = std::vector<Tensor>;                       // host copies
using OpRun = std::function<Outputs(Backend&, bool ref)>;    // builds inputs, runs, returns outputs

struct Expect {
  Expect(std::string n, double b, bool ex = false, std::vector<uint8_t> rows = {})
      : name(std::move(n)), bound(b), exact(ex), row_active(std::move(rows)) {}
  std::string name;                 // output name
  double bound;                     // on ‖out − ref‖ / ‖ref‖
  bool exact;                       // exact equality instead
  std::vector<uint8_t> row_active;  // empty: every row; else rows with 0 must stay poisoned
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Runs `run` on the CPU and on each device backend and checks each output.
void check_op(const std::string& op, const std::string& case_name, const std::string& types,
              const OpRun& run, const std::vector<Expect>& expects) {
  ASSERT_TRUE(covered_ops().count(op)) << op << ": its test does not name it in OPS_TEST";
  auto cpu = make_cpu_backend();
  const Outputs ref = run(*cpu, true);
  ASSERT_EQ(ref.size(), expects.size());
  for (auto& be : device_backends()) {
    const Outputs a = run(*be, false);
    const Outputs b = run(*be, false);
    ASSERT_EQ(a.size(), expects.size());
    for (size_t o = 0; o < expects.size(); ++o) {
      const Expect& e = expects[o];
      const std::string where = str(op, " ", case_name, " ", types, " [", e.name, "] on ", be->name());
      EXPECT_TRUE(same_bytes(a[o], b[o])) << where << ": two runs differ (a race?)";
      const auto got = a[o].to_floats();
      const auto want = ref[o].to_floats();
      ASSERT_EQ(got.size(), want.size()) << where;
      const int64_t rows = a[o].rank() ? a[o].dim(0) : 1;
      const int64_t per_row = rows ? static_cast<int64_t>(got.size()) / rows : 0;
      double num = 0, den = 0;
      int64_t bad = 0, unwritten = 0, touched = 0, mismatches = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const bool active = e.row_active.empty() || e.row_active[static_cast<size_t>(r)];
        for (int64_t i = r * per_row; i < (r + 1) * per_row; ++i) {
          const float g = got[static_cast<size_t>(i)], w = want[static_cast<size_t>(i)];
          if (!active) {
            if (!std::isnan(g)) ++touched;  // a skipped row must be left as it was
            continue;
          }
          if (std::isnan(g) && !std::isnan(w)) ++unwritten;
          if (!std::isfinite(g) && std::isfinite(w)) ++bad;
          if (e.exact) {
            if (!(g == w || (std::isnan(g) && std::isnan(w)))) ++mismatches;
            continue;
          }
          if (!std::isfinite(g) || !std::isfinite(w)) continue;
          num += (double(g) - w) * (double(g) - w);
          den += double(w) * w;
        }
      }
      const double err = e.exact ? double(mismatches) : std::sqrt(num / std::max(den, 1e-300));
      const bool ok = bad == 0 && unwritten == 0 && touched == 0 &&
                      (e.exact ? mismatches == 0 : err <= e.bound);
      std::printf("OPERR | %-16s | %-44s | %-18s | %-12s | %.2e | %.0e | %s\n", op.c_str(),
                  case_name.c_str(), types.c_str(), e.name.c_str(), err, e.exact ? 0.0 : e.bound,
                  ok ? "ok" : "FAIL");
      std::fflush(stdout);
      EXPECT_EQ(unwritten, 0) << where << ": elements left unwritten (still NaN)";
      EXPECT_EQ(bad, 0) << where << ": non-finite values where the CPU has finite ones";
      EXPECT_EQ(touched, 0) << where << ": skipped rows were written";
      if (e.exact)
        EXPECT_EQ(mismatches, 0) << where << ": values differ from the CPU";
      else
        EXPECT_LE(err, e.bound) << where;
    }
  }
}

// Activations: the CUDA backend computes in the checkpoint's dtype (f32, bf16 or f16).
const DType kActs[] = {DType::f32, DType::bf16, DType::f16};

}  // namespace

// ---- matmul ----------------------------------------------------------------------------------
OPS_TEST(Matmul, "matmul") {
  NEED_DEVICE_BACKENDS(devs);
  struct Shape3 {
    int64_t n, in, out;
  };
  const Shape3 shapes[] = {{1, 64, 48}, {7, 129, 33}, {33, 256, 513}, {128, 1024, 384}, {1, 4096, 1}};
  struct Types {
    DType x, w, out;
  };
  const Types types[] = {{DType::f32, DType::f32, DType::f32},   {DType::bf16, DType::bf16, DType::bf16},
                         {DType::f32, DType::bf16, DType::f32},  {DType::bf16, DType::f32, DType::bf16},
                         {DType::bf16, DType::bf16, DType::f32},  {DType::f16, DType::f16, DType::f16},
                         {DType::f16, DType::f16, DType::f32},    {DType::f32, DType::f16, DType::f32}};
  uint32_t seed = 100;
  for (const auto& s : shapes)
    for (const auto& t : types)
      for (bool with_bias : {false, true}) {
        const auto xv = in_dtype(randn(s.n * s.in, ++seed), t.x);
        const auto wv = in_dtype(randn(s.out * s.in, ++seed, 0.05f), t.w);
        const auto bv = in_dtype(randn(s.out, ++seed), t.w);
        OpRun run = [&](Backend& be, bool ref) -> Outputs {
          Tensor x = put(be, ref, {s.n, s.in}, xv, t.x), w = put(be, ref, {s.out, s.in}, wv, t.w);
          Tensor b = put(be, ref, {s.out}, bv, t.w);
          Tensor y = poison(be, ref, {s.n, s.out}, t.out);
          be.matmul(x, w, with_bias ? &b : nullptr, y);
          return {be.to_host(y)};
        };
        // f32 out from 16-bit inputs: products are exact in f32, so the bound stays tight. On
        // tensor cores (x and w both 16-bit) each mma step's sum is truncated, not rounded
        // (Fasi et al., "Numerical behavior of NVIDIA tensor cores", 2021): an error biased
        // by up to one ulp per 16 k — ~1e-5 of the sum at K = 4096, more for a lone output
        // whose sum cancels; 1e-4 still sits far below bf16's own rounding (4e-3).
        const bool tensor_cores = t.x == t.w && t.x != DType::f32;
        check_op("matmul", str(s.n, "x", s.in, "->", s.out, with_bias ? " +bias" : ""),
                 str("x=", dtype_name(t.x), ",w=", dtype_name(t.w), ",o=", dtype_name(t.out)), run,
                 {{"out", bound_for(t.out, tensor_cores ? 1e-4 : 2e-5)}});
      }
}

// ---- embedding -------------------------------------------------------------------------------
OPS_TEST(Embedding, "embedding") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t vocab, width, n;
  };
  for (const Case c : {Case{50, 37, 1}, Case{1000, 256, 17}, Case{32000, 64, 5}})
    for (DType act : kActs)
      for (DType wt : {DType::f32, DType::bf16}) {
        const auto wv = in_dtype(randn(c.vocab * c.width, 7 + c.n), wt);
        std::vector<int64_t> ids(static_cast<size_t>(c.n));
        std::mt19937 g(3);
        for (auto& i : ids) i = std::uniform_int_distribution<int64_t>(0, c.vocab - 1)(g);
        ids[0] = c.vocab - 1;
        OpRun run = [&](Backend& be, bool ref) -> Outputs {
          Tensor w = put(be, ref, {c.vocab, c.width}, wv, wt), id = put_ints(be, {c.n}, ids);
          Tensor out = poison(be, ref, {c.n, c.width}, act);
          be.embedding(w, id, out);
          return {be.to_host(out)};
        };
        const bool exact = act == DType::f32 || act == wt;
        check_op("embedding", str(c.vocab, "x", c.width, " n=", c.n), dts(act, wt), run,
                 {{"out", 1e-2, exact}});
      }
}

// ---- norms, add, swiglu -----------------------------------------------------------------------
OPS_TEST(RmsNorm, "rms_norm") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t n, w;
  };
  for (const Case c : {Case{1, 7}, Case{5, 64}, Case{3, 4096}, Case{64, 1000}})
    for (DType act : kActs)
      for (DType wt : {DType::f32, DType::bf16}) {
        const auto xv = in_dtype(randn(c.n * c.w, 11, 3.0f), act);
        const auto wv = in_dtype(randn(c.w, 12), wt);
        OpRun run = [&](Backend& be, bool ref) -> Outputs {
          Tensor x = put(be, ref, {c.n, c.w}, xv, act), w = put(be, ref, {c.w}, wv, wt);
          Tensor out = poison(be, ref, {c.n, c.w}, act);
          be.rms_norm(x, w, 1e-5f, out);
          return {be.to_host(out)};
        };
        check_op("rms_norm", str(c.n, "x", c.w), dts(act, wt), run, {{"out", bound_for(act)}});
      }
}

OPS_TEST(AddRmsNorm, "add_rms_norm") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t n, w;
  };
  for (const Case c : {Case{1, 7}, Case{5, 64}, Case{3, 4096}, Case{64, 1000}})
    for (DType act : kActs)
      for (DType wt : {DType::f32, DType::bf16}) {
        const auto xv = in_dtype(randn(c.n * c.w, 21, 2.0f), act);
        const auto dv = in_dtype(randn(c.n * c.w, 22), act);
        const auto wv = in_dtype(randn(c.w, 23), wt);
        OpRun run = [&](Backend& be, bool ref) -> Outputs {
          Tensor res = put(be, ref, {c.n, c.w}, xv, act), d = put(be, ref, {c.n, c.w}, dv, act);
          Tensor w = put(be, ref, {c.w}, wv, wt), out = poison(be, ref, {c.n, c.w}, act);
          be.add_rms_norm(res, d, w, 1e-6f, out);
          return {be.to_host(res), be.to_host(out)};
        };
        check_op("add_rms_norm", str(c.n, "x", c.w), dts(act, wt), run,
                 {{"residual", bound_for(act)}, {"out", bound_for(act)}});
      }
}

OPS_TEST(Add, "add") {
  NEED_DEVICE_BACKENDS(devs);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {10, 100}, {3, 4099}})
    for (DType act : kActs) {
      const auto xv = in_dtype(randn(rows * cols, 31), act), yv = in_dtype(randn(rows * cols, 32), act);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {rows, cols}, xv, act), y = put(be, ref, {rows, cols}, yv, act);
        be.add(x, y);
        return {be.to_host(x)};
      };
      check_op("add", str(rows, "x", cols), dts(act, act), run, {{"x", bound_for(act, 1e-7)}});
    }
}

OPS_TEST(Swiglu, "swiglu") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t n, inner;
  };
  for (const Case c : {Case{1, 11}, Case{9, 1024}, Case{130, 344}})
    for (DType act : kActs) {
      const auto gv = in_dtype(randn(c.n * 2 * c.inner, 41, 3.0f), act);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor gu = put(be, ref, {c.n, 2 * c.inner}, gv, act);
        Tensor out = poison(be, ref, {c.n, c.inner}, act);
        be.swiglu(gu, out);
        return {be.to_host(out)};
      };
      check_op("swiglu", str(c.n, "x", c.inner), dts(act, act), run, {{"out", bound_for(act)}});
    }
}

// ---- rope ------------------------------------------------------------------------------------
OPS_TEST(Rope, "rope") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t n, total_heads, head_begin, heads, dim;
    int64_t max_pos;
  };
  for (const Case c : {Case{1, 4, 0, 4, 64, 10}, Case{17, 12, 8, 4, 128, 8192},
                       Case{300, 6, 2, 3, 80, 131072}, Case{5, 3, 0, 3, 32, 1 << 20}})
    for (DType act : kActs) {
      const int64_t W = c.total_heads * c.dim;
      const auto xv = in_dtype(randn(c.n * W, 51), act);
      std::vector<float> inv(static_cast<size_t>(c.dim / 2));
      for (size_t i = 0; i < inv.size(); ++i)
        inv[i] = static_cast<float>(1.0 / std::pow(500000.0, 2.0 * double(i) / double(c.dim)));
      std::vector<int64_t> pos(static_cast<size_t>(c.n));
      std::mt19937 g(5);
      for (auto& p : pos) p = std::uniform_int_distribution<int64_t>(0, c.max_pos - 1)(g);
      pos[0] = c.max_pos - 1;
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {c.n, W}, xv, act);
        Tensor f = put(be, ref, {c.dim / 2}, inv, DType::f32), p = put_ints(be, {c.n}, pos);
        be.rope(x, c.head_begin, c.heads, p, f);
        return {be.to_host(x)};
      };
      check_op("rope", str(c.n, "x", c.total_heads, "h heads[", c.head_begin, "+", c.heads, "] D=",
                           c.dim, " pos<", c.max_pos),
               dts(act, DType::f32), run, {{"x", bound_for(act, 1e-6)}});
    }
}

// ---- index ops -------------------------------------------------------------------------------
OPS_TEST(GatherRows, "gather_rows") {
  NEED_DEVICE_BACKENDS(devs);
  for (DType dt : {DType::f32, DType::bf16, DType::i32})
    for (int64_t w : {1, 3, 64, 1000}) {
      const int64_t n = 9, m = 12;
      std::vector<float> sv = in_dtype(randn(n * w, 61, 100.f), dt == DType::i32 ? DType::f32 : dt);
      if (dt == DType::i32)
        for (auto& x : sv) x = std::round(x);
      std::vector<int64_t> idx = {3, -1, 0, 8, 8, 2, -1, 1, 4, 5, 6, 7};
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        const DType t = dt == DType::i32 ? DType::i32 : dt;
        Tensor src = be.upload(Tensor::from_floats({n, w}, sv, ref && t != DType::i32 ? DType::f32 : t));
        Tensor index = put_ints(be, {m}, idx);
        Tensor out = poison(be, ref, {m, w}, t);
        be.gather_rows(src, index, out);
        return {be.to_host(out)};
      };
      check_op("gather_rows", str(n, "x", w, " -> ", m), dtype_name(dt), run, {{"out", 0, true}});
    }
}

OPS_TEST(CopyColumns, "copy_columns") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t rows, src_w, dst_w, col_begin, cols;
  };
  for (const Case c : {Case{1, 5, 9, 2, 5}, Case{7, 64, 200, 100, 33}, Case{300, 128, 384, 256, 128}})
    for (DType act : kActs) {
      const auto sv = in_dtype(randn(c.rows * c.src_w, 71), act);
      const auto dv = in_dtype(randn(c.rows * c.dst_w, 72), act);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor s = put(be, ref, {c.rows, c.src_w}, sv, act), d = put(be, ref, {c.rows, c.dst_w}, dv, act);
        be.copy_columns(s, d, c.col_begin, c.cols);
        return {be.to_host(d)};
      };
      check_op("copy_columns", str(c.rows, "x", c.src_w, " -> cols ", c.col_begin, "+", c.cols, " of ", c.dst_w),
               dtype_name(act), run, {{"dst", 0, true}});
    }
}

OPS_TEST(CopyHeads, "copy_heads") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t tokens, src_w, dst_w;
    HeadCopy c;
  };
  // MLA's uses: rotary columns de-interleaved (step 2) beside each head's latent, a head's part
  // gathered, the latent copied once, heads to and from head-major blocks; and a wide copy.
  const HeadCopy deinterleave_even{.src_begin = 24, .src_stride = 40, .step = 2, .dst_begin = 0, .dst_stride = 48,
                                   .heads = 4, .width = 8};
  const HeadCopy deinterleave_odd{.src_begin = 25, .src_stride = 40, .step = 2, .dst_begin = 8, .dst_stride = 48,
                                  .heads = 4, .width = 8};
  const HeadCopy part{.src_begin = 16, .width = 32};
  const HeadCopy to_blocks{.src_begin = 0, .src_stride = 20, .heads = 3, .width = 12, .dst_blocks = true};
  const HeadCopy from_blocks{.src_begin = 2, .dst_begin = 4, .dst_stride = 20, .heads = 3, .width = 16,
                             .src_blocks = true};
  const HeadCopy wide{.src_begin = 0, .src_stride = 576, .dst_begin = 64, .dst_stride = 576, .heads = 3, .width = 512};
  for (const Case& k : {Case{5, 160, 200, deinterleave_even}, Case{33, 160, 200, deinterleave_odd},
                        Case{7, 48, 32, part}, Case{7, 60, 12, to_blocks}, Case{9, 18, 60, from_blocks},
                        Case{130, 1728, 1728, wide}})
    for (DType act : kActs) {
      const int64_t sr = k.c.src_blocks ? k.tokens * k.c.heads : k.tokens;
      const int64_t dr = k.c.dst_blocks ? k.tokens * k.c.heads : k.tokens;
      const auto sv = in_dtype(randn(sr * k.src_w, 73), act);
      const auto dv = in_dtype(randn(dr * k.dst_w, 74), act);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor s = put(be, ref, {sr, k.src_w}, sv, act), d = put(be, ref, {dr, k.dst_w}, dv, act);
        be.copy_heads(s, d, k.c);
        return {be.to_host(d)};
      };
      check_op("copy_heads", str(sr, "x", k.src_w, " heads ", k.c.heads, "x", k.c.width, " step ", k.c.step,
                                 k.c.src_blocks ? " from blocks" : "", k.c.dst_blocks ? " to blocks" : "", " -> ", dr,
                                 "x", k.dst_w),
               dtype_name(act), run, {{"dst", 0, true}});
    }
}

// Against its definition on the CPU (the reference backend is the CPU itself): every copied
// value lands where HeadCopy says, the rest of dst is untouched; and to head blocks and back.
TEST(BackendOps, CopyHeadsIsItsDefinitionOnTheCpu) {
  auto be = make_cpu_backend();
  const int64_t rows = 3, sw = 40, dw = 30;
  std::vector<float> sv(rows * sw), dv(rows * dw, -1.f);
  for (size_t i = 0; i < sv.size(); ++i) sv[i] = static_cast<float>(i);
  const HeadCopy c{.src_begin = 5, .src_stride = 11, .step = 2, .dst_begin = 1, .dst_stride = 9, .heads = 3, .width = 4};
  Tensor s = be->upload(Tensor::from_floats({rows, sw}, sv, DType::f32));
  Tensor d = be->upload(Tensor::from_floats({rows, dw}, dv, DType::f32));
  be->copy_heads(s, d, c);
  const Tensor out = be->to_host(d);
  std::vector<float> want = dv;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t j = 0; j < c.width; ++j)
        want[r * dw + c.dst_begin + h * c.dst_stride + j] = sv[r * sw + c.src_begin + h * c.src_stride + j * c.step];
  for (int64_t i = 0; i < rows * dw; ++i) EXPECT_EQ(out.ptr<float>()[i], want[i]) << "index " << i;
  // Heads [h·13, h·13 + 13) of each row to blocks of rows and back: the same values.
  Tensor blocks = be->empty({3 * rows, 13}, DType::f32), back = be->zeros({rows, sw}, DType::f32);
  be->copy_heads(s, blocks, HeadCopy{.src_stride = 13, .heads = 3, .width = 13, .dst_blocks = true});
  const Tensor b = be->to_host(blocks);
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < 13; ++j)
        EXPECT_EQ(b.ptr<float>()[(h * rows + r) * 13 + j], sv[r * sw + h * 13 + j]) << h << " " << r << " " << j;
  be->copy_heads(blocks, back, HeadCopy{.dst_stride = 13, .heads = 3, .width = 13, .src_blocks = true});
  const Tensor bk = be->to_host(back);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < 39; ++j) EXPECT_EQ(bk.ptr<float>()[r * sw + j], sv[r * sw + j]);
  HeadCopy past = c;
  past.src_begin = 20;  // the last head's last value: column 20 + 2·11 + 3·2 = 48, past src's 40
  EXPECT_THROW(be->copy_heads(s, d, past), Error);
  EXPECT_THROW(be->copy_heads(s, blocks, HeadCopy{.src_stride = 13, .heads = 2, .width = 13, .dst_blocks = true}),
               Error);  // 2 heads' blocks are 6 rows, not 9
}

OPS_TEST(ScaleByPosition, "scale_by_position") {
  NEED_DEVICE_BACKENDS(devs);
  const int64_t n = 9, w = 40;
  const std::vector<int64_t> pos = {0, 7, 8, 15, 16, 100, -1, 8191, 8192};
  for (DType act : kActs) {
    const auto xv = in_dtype(randn(n * w, 75), act);
    OpRun run = [&](Backend& be, bool ref) -> Outputs {
      Tensor x = put(be, ref, {n, w}, xv, act), p = put_ints(be, {n}, pos);
      be.scale_by_position(x, 4, 30, p, 0.1f, 8);
      return {be.to_host(x)};
    };
    check_op("scale_by_position", str(n, "x", w, " cols 4+30 period 8"), dtype_name(act), run,
             {{"x", bound_for(act, 1e-6)}});
  }
}

// Against transformers' get_llama_4_attn_scale on the CPU: 1 + beta·log(1 + floor(pos / period)),
// each step in f32; a skipped row (position −1) and the columns outside untouched.
TEST(BackendOps, ScaleByPositionIsLlama4sScaleOnTheCpu) {
  auto be = make_cpu_backend();
  const std::vector<int64_t> pos = {0, 15, 16, 47, -1};
  std::vector<float> xv(5 * 6, 2.0f);
  Tensor x = be->upload(Tensor::from_floats({5, 6}, xv, DType::f32));
  be->scale_by_position(x, 1, 4, be->upload(Tensor::from_ints({5}, pos, DType::i32)), 0.1f, 16);
  const Tensor out = be->to_host(x);
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 6; ++c) {
      float f = 1.0f;
      if (pos[r] >= 0 && c >= 1 && c < 5)
        f = 1.0f + 0.1f * std::log(1.0f + std::floor(static_cast<float>(pos[r]) / 16.0f));
      EXPECT_EQ(out.ptr<float>()[r * 6 + c], 2.0f * f) << r << " " << c;
    }
  EXPECT_EQ(out.ptr<float>()[2 * 6 + 1], 2.0f * (1.0f + 0.1f * std::log(2.0f)));  // position 16: one period passed
  EXPECT_THROW(be->scale_by_position(x, 3, 4, be->upload(Tensor::from_ints({5}, pos, DType::i32)), 0.1f, 16), Error);
}

OPS_TEST(Convert, "convert") {
  NEED_DEVICE_BACKENDS(devs);
  auto vals = randn(4097, 81, 10.f);
  vals[0] = 70000.f;      // f16 overflow: infinity
  vals[1] = 1e-6f;        // an f16 subnormal
  vals[2] = -0.f;
  vals[3] = 3.0e38f;      // finite in bf16, infinite in f16
  const DType all[] = {DType::f32, DType::bf16, DType::f16};
  for (DType from : all)
    for (DType to : all) {
      if (from == to) continue;
      const auto v = in_dtype(vals, from);
      auto cpu = make_cpu_backend();
      // The CPU's conversion is the reference, done on the host from the same bits.
      Tensor src_h = Tensor::from_floats({4097}, v, from);
      Tensor ref_h = Tensor::empty({4097}, to);
      cpu->convert(src_h, ref_h);
      for (auto& be : device_backends()) {
        Tensor src = be->upload(src_h), dst = poison(*be, false, {4097}, to);
        be->convert(src, dst);
        Tensor got = be->to_host(dst);
        const bool ok = same_bytes(got, ref_h);
        std::printf("OPERR | %-16s | %-44s | %-18s | %-12s | %.2e | %.0e | %s\n", "convert", "n=4097",
                    str(dtype_name(from), "->", dtype_name(to)).c_str(), "dst", ok ? 0.0 : 1.0, 0.0,
                    ok ? "ok" : "FAIL");
        EXPECT_TRUE(ok) << "convert " << dtype_name(from) << " -> " << dtype_name(to)
                        << " differs bitwise from the CPU";
      }
    }
}

// ---- kv_write --------------------------------------------------------------------------------
namespace {
struct CacheGeom {
  int64_t q_heads, kv_heads, dim, max_seq, page_size, cache_rows;
  AttentionDims dims() const {
    AttentionDims d;
    d.q_heads = q_heads;
    d.kv_heads = kv_heads;
    d.head_dim = dim;
    d.max_seq = max_seq;
    d.page_size = page_size;
    return d;
  }
  int64_t cache_numel() const { return cache_rows * kv_heads * max_seq * dim; }
  Shape cache_shape() const { return {cache_rows, kv_heads, max_seq, dim}; }
  std::string describe() const {
    return str("qh=", q_heads, " kvh=", kv_heads, " D=", dim, " seq=", max_seq, " page=", page_size,
               " rows=", cache_rows);
  }
};
}  // namespace

OPS_TEST(KvWrite, "kv_write") {
  NEED_DEVICE_BACKENDS(devs);
  for (const CacheGeom g : {CacheGeom{4, 4, 64, 64, 16, 2}, CacheGeom{8, 2, 128, 256, 64, 3},
                            CacheGeom{6, 3, 80, 96, 32, 1}})
    for (DType act : kActs) {
      const AttentionDims d = g.dims();
      const int64_t total_slots = g.cache_rows * g.max_seq;
      std::vector<int64_t> slots(static_cast<size_t>(total_slots));
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), std::mt19937(9));
      const int64_t n = std::min<int64_t>(37, total_slots);
      slots.resize(static_cast<size_t>(n));
      slots[1] = -1;  // skipped
      slots[n - 1] = -1;
      const auto qkv = in_dtype(randn(n * d.qkv_width(), 91), act);
      const auto kc = in_dtype(randn(g.cache_numel(), 92), act);
      const auto vc = in_dtype(randn(g.cache_numel(), 93), act);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {n, d.qkv_width()}, qkv, act), s = put_ints(be, {n}, slots);
        Tensor ck = put(be, ref, g.cache_shape(), kc, act), cv = put(be, ref, g.cache_shape(), vc, act);
        be.kv_write(x, d, s, ck, cv);
        return {be.to_host(ck), be.to_host(cv)};
      };
      check_op("kv_write", g.describe(), dtype_name(act), run, {{"cache_k", 0, true}, {"cache_v", 0, true}});
    }
}

// ---- attention_packed ------------------------------------------------------------------------
OPS_TEST(AttentionPacked, "attention_packed") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t q_heads, kv_heads, dim;
    std::vector<int64_t> runs;  // lengths; a negative entry is that many skipped tokens
  };
  const std::vector<Case> cases = {
      {4, 4, 64, {1}},
      {8, 2, 32, {5, -3, 20, 1, 13}},
      {4, 2, 128, {1000}},
      {6, 6, 80, {100, 200, -7, 57}},
      {4, 2, 48, {33, 31, 2}},
      {8, 4, 96, {-1, 70, -2, 18}},
      {4, 1, 64, {16, 16, 16, 17}},
      // Latent attention's heads (layers/latent_attention.h): one KV head of qk_rope + kv_lora.
      {16, 1, 576, {40, 7}},
      {8, 1, 320, {33, -2, 5}},
  };
  for (const Case& c : cases)
    for (DType act : kActs) {
      AttentionDims d;
      d.q_heads = c.q_heads;
      d.kv_heads = c.kv_heads;
      d.head_dim = c.dim;
      d.max_seq = 4096;
      d.page_size = 64;
      std::vector<int64_t> start;
      std::vector<uint8_t> active;
      for (int64_t r : c.runs) {
        const int64_t s = static_cast<int64_t>(start.size());
        for (int64_t i = 0; i < std::abs(r); ++i) {
          start.push_back(r > 0 ? s : -1);
          active.push_back(r > 0);
        }
      }
      const int64_t n = static_cast<int64_t>(start.size());
      const auto qkv = in_dtype(randn(n * d.qkv_width(), 101 + static_cast<uint32_t>(n), 1.5f), act);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {n, d.qkv_width()}, qkv, act), rs = put_ints(be, {n}, start);
        Tensor out = poison(be, ref, {n, d.q_heads * d.head_dim}, act);
        be.attention_packed(x, d, rs, out);
        return {be.to_host(out)};
      };
      std::string runs;
      for (int64_t r : c.runs) runs += str(runs.empty() ? "" : ",", r);
      check_op("attention_packed", str("qh=", c.q_heads, " kvh=", c.kv_heads, " D=", c.dim, " runs=", runs),
               dtype_name(act), run, {{"out", bound_for(act), false, active}});
    }
}

// ---- attention_cache -------------------------------------------------------------------------
OPS_TEST(AttentionCache, "attention_cache") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    CacheGeom g;
    int64_t table_rows;
    std::vector<std::pair<int64_t, int64_t>> tokens;  // (logical row, position); row -1: skipped
  };
  std::vector<Case> cases = {
      {{8, 8, 64, 256, 16, 4}, 4, {{0, 0}, {1, 17}, {2, 255}, {-1, 0}, {3, 100}}},
      {{8, 2, 128, 4096, 64, 2}, 2, {{0, 4095}, {1, 1000}, {0, 63}}},
      {{4, 1, 96, 1024, 32, 3}, 3, {}},
      {{4, 2, 32, 512, 16, 2}, 2, {{1, 511}, {0, 1}, {-1, 3}}},
      {{6, 3, 48, 128, 64, 5}, 5, {{4, 127}, {0, 64}, {2, 5}}},
      {{4, 4, 80, 2048, 128, 2}, 2, {{0, 2047}}},
      // Latent attention (DeepSeek, Kimi K2): 16 heads over one head of 64 + 512 (decode steps).
      {{16, 1, 576, 512, 64, 2}, 2, {{0, 511}, {1, 130}, {0, 3}}},
  };
  for (int64_t p = 0; p < 300; ++p) cases[2].tokens.push_back({2, p});  // a prefill-like chunk
  cases[2].tokens.push_back({0, 700});
  cases[2].tokens.push_back({-1, 5});
  for (const Case& c : cases)
    for (DType act : kActs) {
      const CacheGeom& g = c.g;
      const AttentionDims d = g.dims();
      const int64_t ppr = g.max_seq / g.page_size, num_pages = g.cache_rows * ppr;
      // Shuffled pages; logical row 1 shares the first half of row 0's pages (a shared prefix).
      std::vector<int64_t> perm(static_cast<size_t>(num_pages));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), std::mt19937(static_cast<uint32_t>(num_pages)));
      std::vector<int64_t> table(static_cast<size_t>(c.table_rows * ppr));
      for (size_t i = 0; i < table.size(); ++i) table[i] = perm[i % perm.size()];
      if (c.table_rows > 1)
        for (int64_t j = 0; j < ppr / 2; ++j) table[static_cast<size_t>(ppr + j)] = table[static_cast<size_t>(j)];
      const int64_t n = static_cast<int64_t>(c.tokens.size());
      std::vector<int64_t> rows, pos;
      std::vector<uint8_t> active;
      for (auto [r, p] : c.tokens) {
        rows.push_back(r);
        pos.push_back(p);
        active.push_back(r >= 0);
      }
      const auto qkv = in_dtype(randn(n * d.qkv_width(), 111, 1.5f), act);
      const auto kc = in_dtype(randn(g.cache_numel(), 112, 1.5f), act);
      const auto vc = in_dtype(randn(g.cache_numel(), 113), act);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {n, d.qkv_width()}, qkv, act);
        Tensor r = put_ints(be, {n}, rows), p = put_ints(be, {n}, pos);
        Tensor t = put_ints(be, {c.table_rows, ppr}, table);
        Tensor ck = put(be, ref, g.cache_shape(), kc, act), cv = put(be, ref, g.cache_shape(), vc, act);
        Tensor out = poison(be, ref, {n, d.q_heads * d.head_dim}, act);
        be.attention_cache(x, d, r, p, t, ck, cv, out);
        return {be.to_host(out)};
      };
      check_op("attention_cache", str(g.describe(), " n=", n), dtype_name(act), run,
               {{"out", bound_for(act), false, active}});
    }
}

// ---- attention sinks (gpt-oss) ------------------------------------------------------------------
// One f32 logit per q head joins each softmax's denominator, on both attention ops, full and
// windowed (gpt-oss's sliding layers): packed runs, decode steps and a prefill chunk through a
// page table; one head's sink far above its scores (the keys' shares near 0).
OPS_TEST(AttentionSinks, "attention_packed", "attention_cache") {
  NEED_DEVICE_BACKENDS(devs);
  const CacheGeom g{8, 2, 64, 256, 16, 2};
  std::vector<float> sink_values = randn(8, 121, 2.0f);
  sink_values[3] = 30.0f;
  for (int64_t window : {int64_t{0}, int64_t{8}})
    for (DType act : kActs) {
      AttentionDims d = g.dims();
      d.window = window;
      const std::vector<int64_t> runs = {20, -2, 9};
      std::vector<int64_t> start;
      std::vector<uint8_t> active;
      for (int64_t r : runs)
        for (int64_t i = 0, s = static_cast<int64_t>(start.size()); i < std::abs(r); ++i) {
          start.push_back(r > 0 ? s : -1);
          active.push_back(r > 0);
        }
      const int64_t n = static_cast<int64_t>(start.size());
      const auto qkv = in_dtype(randn(n * d.qkv_width(), 122, 1.5f), act);
      OpRun packed = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {n, d.qkv_width()}, qkv, act), rs = put_ints(be, {n}, start);
        Tensor sinks = put(be, true, {g.q_heads}, sink_values, DType::f32);
        AttentionDims dd = d;
        dd.sinks = &sinks;
        Tensor out = poison(be, ref, {n, d.q_heads * d.head_dim}, act);
        be.attention_packed(x, dd, rs, out);
        return {be.to_host(out)};
      };
      check_op("attention_packed", str("sinks window=", window), dtype_name(act), packed,
               {{"out", bound_for(act), false, active}});

      const int64_t ppr = g.max_seq / g.page_size;
      std::vector<int64_t> table(static_cast<size_t>(2 * ppr));
      for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int64_t>((i * 7) % table.size());
      std::vector<int64_t> rows, pos;
      for (int64_t p = 0; p < 40; ++p) rows.push_back(0), pos.push_back(p);  // a prefill chunk
      rows.push_back(1), pos.push_back(200);                                 // decode steps
      rows.push_back(-1), pos.push_back(0);
      rows.push_back(1), pos.push_back(3);
      const int64_t m = static_cast<int64_t>(rows.size());
      std::vector<uint8_t> on(rows.size());
      for (size_t i = 0; i < rows.size(); ++i) on[i] = rows[i] >= 0;
      const auto q = in_dtype(randn(m * d.qkv_width(), 123, 1.5f), act);
      const auto kc = in_dtype(randn(g.cache_numel(), 124, 1.5f), act);
      const auto vc = in_dtype(randn(g.cache_numel(), 125), act);
      OpRun cache = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {m, d.qkv_width()}, q, act);
        Tensor r = put_ints(be, {m}, rows), p = put_ints(be, {m}, pos), t = put_ints(be, {2, ppr}, table);
        Tensor ck = put(be, ref, g.cache_shape(), kc, act), cv = put(be, ref, g.cache_shape(), vc, act);
        Tensor sinks = put(be, true, {g.q_heads}, sink_values, DType::f32);
        AttentionDims dd = d;
        dd.sinks = &sinks;
        dd.row_run = 40;
        Tensor out = poison(be, ref, {m, d.q_heads * d.head_dim}, act);
        be.attention_cache(x, dd, r, p, t, ck, cv, out);
        return {be.to_host(out)};
      };
      check_op("attention_cache", str("sinks window=", window), dtype_name(act), cache,
               {{"out", bound_for(act), false, on}});
    }
}

// ---- a KV cache in another dtype (--kv-cache-dtype) -----------------------------------------
// kv_write rounds K and V to the cache's dtype (bf16, f16, FP8 E4M3, or f32 beside 16-bit
// activations), attention_cache widens them exactly, attention_packed with round_kv rounds the
// K and V it reads from qkv alike: the cache's bytes equal the CPU's, the outputs are within
// the activations' bound of it, and on the device a narrower cache gives the bits of the
// activations' own cache holding the rounded values (where the activations' dtype holds them
// exactly), on both paths — the invariant CpuBackend.ANarrowerCacheRoundsKeysAndValuesAlikeOnEveryPath
// checks on the CPU.
OPS_TEST(NarrowerKvCache, "kv_write", "attention_packed", "attention_cache") {
  NEED_DEVICE_BACKENDS(devs);
  const CacheGeom g{8, 2, 64, 256, 16, 2};
  const int64_t ppr = g.max_seq / g.page_size;
  std::vector<int64_t> table(static_cast<size_t>(2 * ppr));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(17));
  // Row 0: a prompt of 150 tokens (past a split of 128 keys); row 1: 9.
  std::vector<int64_t> rows, pos, slots, start;
  for (auto [row, len] : {std::pair<int64_t, int64_t>{0, 150}, {1, 9}})
    for (int64_t p = 0; p < len; ++p) {
      rows.push_back(row);
      pos.push_back(p);
      slots.push_back(table[static_cast<size_t>(row * ppr + p / g.page_size)] * g.page_size + p % g.page_size);
      start.push_back(row == 0 ? 0 : 150);
    }
  const int64_t n = static_cast<int64_t>(rows.size());
  for (DType act : {DType::f32, DType::bf16})
    for (DType ct : {DType::bf16, DType::f16, DType::f8_e4m3, DType::f32}) {
      if (ct == act) continue;
      AttentionDims d = g.dims();
      d.round_kv = ct;
      auto qkv = in_dtype(randn(n * d.qkv_width(), 121, 1.5f), act);
      qkv[static_cast<size_t>(5 * d.qkv_width() + d.q_heads * d.head_dim)] = 600.f;  // FP8 saturates at 448
      std::vector<float> rounded = qkv;  // K and V as the cache holds them, q as it is
      for (int64_t t = 0; t < n; ++t)
        for (int64_t c = d.q_heads * d.head_dim; c < d.qkv_width(); ++c) {
          float& v = rounded[static_cast<size_t>(t * d.qkv_width() + c)];
          v = round_to(ct, v);
        }
      // kv_write into a zeroed cache, attention_cache over it, attention_packed: cache_k,
      // cache_v, the cache's output, the packed output. ref: the CPU's f32 run.
      auto ops = [&](Backend& be, bool ref, const std::vector<float>& values, const AttentionDims& dims, DType cache) {
        Tensor x = put(be, ref, {n, d.qkv_width()}, values, act);
        Tensor ck = be.upload(Tensor::zeros(g.cache_shape(), cache)), cv = be.upload(Tensor::zeros(g.cache_shape(), cache));
        Tensor out_c = poison(be, ref, {n, d.q_heads * d.head_dim}, act);
        Tensor out_p = poison(be, ref, {n, d.q_heads * d.head_dim}, act);
        be.kv_write(x, dims, put_ints(be, {n}, slots), ck, cv);
        be.attention_cache(x, dims, put_ints(be, {n}, rows), put_ints(be, {n}, pos), put_ints(be, {2, ppr}, table), ck, cv,
                           out_c);
        be.attention_packed(x, dims, put_ints(be, {n}, start), out_p);
        return Outputs{be.to_host(ck), be.to_host(cv), be.to_host(out_c), be.to_host(out_p)};
      };
      auto outputs = [&](std::vector<size_t> which) -> OpRun {
        return [&, which](Backend& be, bool ref) {
          const Outputs all = ops(be, ref, qkv, d, ct);
          Outputs some;
          for (size_t i : which) some.push_back(all[i]);
          return some;
        };
      };
      const std::string name = str(g.describe(), " n=", n, " cache=", dtype_name(ct));
      check_op("kv_write", name, dtype_name(act), outputs({0, 1}), {{"cache_k", 0, true}, {"cache_v", 0, true}});
      check_op("attention_cache", name, dtype_name(act), outputs({2}), {{"out", bound_for(act)}});
      check_op("attention_packed", name, dtype_name(act), outputs({3}), {{"out", bound_for(act)}});
      // Where act holds every value of ct (f32 holds them all; bf16 holds FP8's and f32's own
      // rounding of bf16 is bf16), the narrower cache is the act-cache run on rounded K and V.
      if (act == DType::bf16 && ct == DType::f16) continue;
      AttentionDims plain = g.dims();
      for (auto& be : devs) {
        const Outputs narrow = ops(*be, false, qkv, d, ct), wide = ops(*be, false, rounded, plain, act);
        EXPECT_TRUE(same_bytes(narrow[2], wide[2])) << "attention_cache, cache " << dtype_name(ct) << " beside "
                                                    << dtype_name(act) << ": not the bits of the rounded values";
        EXPECT_TRUE(same_bytes(narrow[3], wide[3])) << "attention_packed, round_kv " << dtype_name(ct) << " beside "
                                                    << dtype_name(act) << ": not the bits of the rounded values";
      }
    }
}

// ---- vocab-shard ops -------------------------------------------------------------------------
namespace {
struct VocabCase {
  int64_t n, width, valid, offset;
};
const VocabCase kVocabCases[] = {{1, 1000, 1000, 0}, {4, 32000, 32000, 0}, {3, 10667, 10666, 21334},
                                 {8, 513, 500, 513}};

// Logits with distinct values in valid columns and large values in the padding (which must
// never be read); row 0 gets an exact tie for the maximum (lowest index must win).
std::vector<float> vocab_logits(const VocabCase& c, DType dt, uint32_t seed) {
  auto v = in_dtype(randn(c.n * c.width, seed, 4.0f), dt);
  for (int64_t r = 0; r < c.n; ++r)
    for (int64_t k = c.valid; k < c.width; ++k) v[static_cast<size_t>(r * c.width + k)] = 1e4f;
  if (c.valid >= 4) {
    v[static_cast<size_t>(c.valid - 1)] = 64.f;
    v[2] = 64.f;
  }
  return v;
}
}  // namespace

OPS_TEST(LogitStats, "logit_stats") {
  NEED_DEVICE_BACKENDS(devs);
  for (const VocabCase& c : kVocabCases)
    for (DType dt : kActs) {
      const auto lv = vocab_logits(c, dt, 121);
      std::vector<int64_t> tg(static_cast<size_t>(c.n));
      for (int64_t r = 0; r < c.n; ++r) tg[static_cast<size_t>(r)] = c.offset + (r * 7919) % (c.valid + 3);
      tg[0] = -1;
      if (c.n > 1) tg[1] = c.offset - 1;
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor l = put(be, ref, {c.n, c.width}, lv, dt), t = put_ints(be, {c.n}, tg);
        Tensor mx = poison(be, ref, {c.n}, DType::f32), se = poison(be, ref, {c.n}, DType::f32),
               tl = poison(be, ref, {c.n}, DType::f32);
        be.logit_stats(l, c.valid, c.offset, t, mx, se, tl);
        return {be.to_host(mx), be.to_host(se), be.to_host(tl)};
      };
      check_op("logit_stats", str(c.n, "x", c.width, " valid=", c.valid, " off=", c.offset), dtype_name(dt),
               run, {{"max", 0, true}, {"sumexp", 1e-5}, {"target", 0, true}});
    }
}

OPS_TEST(Argmax, "argmax") {
  NEED_DEVICE_BACKENDS(devs);
  for (const VocabCase& c : kVocabCases)
    for (DType dt : kActs) {
      const auto lv = vocab_logits(c, dt, 131);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor l = put(be, ref, {c.n, c.width}, lv, dt);
        Tensor v = poison(be, ref, {c.n}, DType::f32), i = poison(be, ref, {c.n}, DType::i32);
        be.argmax(l, c.valid, c.offset, v, i);
        return {be.to_host(v), be.to_host(i)};
      };
      check_op("argmax", str(c.n, "x", c.width, " valid=", c.valid, " off=", c.offset), dtype_name(dt), run,
               {{"value", 0, true}, {"index", 0, true}});
    }
}

OPS_TEST(GumbelMax, "gumbel_max") {
  NEED_DEVICE_BACKENDS(devs);
  for (const VocabCase& c : kVocabCases)
    for (DType dt : kActs)
      for (float temperature : {0.7f, 1.0f, 1.3f}) {
        const auto lv = vocab_logits(c, dt, 141);
        const uint64_t key0 = 0x0123456789abcdefULL, key1 = 0xfedcba9876543210ULL;
        for (int32_t step : {0, 5}) {
          OpRun run = [&](Backend& be, bool ref) -> Outputs {
            Tensor l = put(be, ref, {c.n, c.width}, lv, dt);
            Tensor v = poison(be, ref, {c.n}, DType::f32), i = poison(be, ref, {c.n}, DType::i32);
            be.gumbel_max(l, c.valid, c.offset, key0, key1, step, temperature, v, i);
            return {be.to_host(v), be.to_host(i)};
          };
          check_op("gumbel_max",
                   str(c.n, "x", c.width, " valid=", c.valid, " off=", c.offset, " T=", temperature, " step=", step),
                   dtype_name(dt), run, {{"value", 0, true}, {"index", 0, true}});
        }
      }
}

// gpt-oss's clamped SwiGLU (interleaved gate/up columns): values on both sides of ±limit.
OPS_TEST(SwigluClamped, "swiglu_clamped") {
  NEED_DEVICE_BACKENDS(devs);
  for (auto [n, inner] : {std::pair<int64_t, int64_t>{1, 11}, {9, 1024}, {130, 344}})
    for (DType act : kActs) {
      const auto gv = in_dtype(randn(n * 2 * inner, 152, 6.0f), act);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor gu = put(be, ref, {n, 2 * inner}, gv, act);
        Tensor out = poison(be, ref, {n, inner}, act);
        be.swiglu_clamped(gu, out, 1.702f, 7.0f);
        return {be.to_host(out)};
      };
      check_op("swiglu_clamped", str(n, "x", inner), dts(act, act), run, {{"out", bound_for(act)}});
    }
}

// ---- Gated DeltaNet (issue 40): rows interleaved, the state carried across two calls; in the
// second, one token's state kept in row 2 (a snapshot, as the engine's prefix sharing keeps one) --
// keep for a call of n tokens: token t's row state copied to row 2, no other.
static std::vector<int64_t> kept_at(int64_t t, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n), -1);
  v[static_cast<size_t>(t)] = 2;
  return v;
}

OPS_TEST(CausalConv1d, "causal_conv1d") {
  NEED_DEVICE_BACKENDS(devs);
  for (auto [n, c, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 8, 4}, {33, 96, 4}, {130, 1024, 2}})
    for (DType act : kActs) {
      const auto xv = in_dtype(randn(2 * n * c, 171, 2.0f), act), wv = randn(c * k, 172, 0.5f);
      std::vector<int64_t> rows;
      for (int64_t t = 0; t < n; ++t) rows.push_back(t % 3 == 1 ? 1 : 0);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor w = put(be, true, {c, k}, wv, DType::f32);
        Tensor state = be.upload(Tensor::zeros({3, c, k - 1}, DType::f32));
        Tensor r = put_ints(be, {n}, rows), keep = put_ints(be, {n}, kept_at(n / 2, n));
        Outputs outs;
        for (int64_t call = 0; call < 2; ++call) {  // the second call goes on from the state
          std::vector<float> part(xv.begin() + call * n * c, xv.begin() + (call + 1) * n * c);
          Tensor x = put(be, ref, {n, c}, part, act);
          Tensor out = poison(be, ref, {n, c}, act);
          be.causal_conv1d(x, w, r, call == 1 ? keep : Tensor(), state, out);
          outs.push_back(be.to_host(out));
        }
        outs.push_back(be.to_host(state));
        return outs;
      };
      check_op("causal_conv1d", str(n, "x", c, " K=", k), dtype_name(act), run,
               {{"out", bound_for(act)}, {"out2", bound_for(act)}, {"state", bound_for(act)}});
    }
}

// Two rows interleaved token by token, two calls carrying the state; with positions where the
// larger calls hold aligned chunks (a row's tokens 0 … n/2 − 1, then n/2 …): the chunked form,
// with a keep inside the second call's first chunk.
OPS_TEST(GatedDeltaRule, "gated_delta_rule") {
  NEED_DEVICE_BACKENDS(devs);
  for (auto [n, d] : {std::pair<int64_t, DeltaNetDims>{1, {1, 16, 1, 16}}, {40, {2, 64, 4, 32}}, {70, {4, 128, 8, 128}},
                      {4 * kDeltaRuleChunk, {2, 128, 4, 128}}, {4 * kDeltaRuleChunk + 6, {1, 32, 3, 48}}})
    for (DType act : kActs) {
      const auto qv = in_dtype(randn(2 * n * d.qkv_width(), 173, 1.0f), act);
      const auto abv = in_dtype(randn(2 * n * 2 * d.value_heads, 174, 2.0f), act);
      const auto alog = randn(d.value_heads, 175, 0.5f), dtb = randn(d.value_heads, 176, 0.5f);
      std::vector<int64_t> rows, pos[2];
      for (int64_t t = 0; t < n; ++t) {
        rows.push_back(t % 2);
        for (int64_t call = 0; call < 2; ++call) pos[call].push_back(call * ((n + 1) / 2) + t / 2);
      }
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor a_log = put(be, true, {d.value_heads}, alog, DType::f32), dt_bias = put(be, true, {d.value_heads}, dtb, DType::f32);
        Tensor state = be.upload(Tensor::zeros({3, d.value_heads, d.key_dim, d.value_dim}, DType::f32));
        Tensor r = put_ints(be, {n}, rows), keep = put_ints(be, {n}, kept_at(n > 40 ? 41 : n - 1, n));
        Outputs outs;
        for (int64_t call = 0; call < 2; ++call) {
          const int64_t w = d.qkv_width(), a = 2 * d.value_heads;
          Tensor qkv = put(be, ref, {n, w}, {qv.begin() + call * n * w, qv.begin() + (call + 1) * n * w}, act);
          Tensor ab = put(be, ref, {n, a}, {abv.begin() + call * n * a, abv.begin() + (call + 1) * n * a}, act);
          Tensor out = poison(be, ref, {n, d.value_heads * d.value_dim}, act);
          be.gated_delta_rule(qkv, ab, a_log, dt_bias, r, put_ints(be, {n}, pos[call]), call == 1 ? keep : Tensor(), d,
                              state, out);
          outs.push_back(be.to_host(out));
        }
        outs.push_back(be.to_host(state));
        return outs;
      };
      check_op("gated_delta_rule", str(n, " tokens, ", d.key_heads, "x", d.key_dim, " / ", d.value_heads, "x", d.value_dim),
               dtype_name(act), run, {{"out", bound_for(act)}, {"out2", bound_for(act)}, {"state", bound_for(act)}});
    }
}

OPS_TEST(RmsNormGated, "rms_norm_gated") {
  NEED_DEVICE_BACKENDS(devs);
  for (auto [n, groups, w] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 16}, {9, 4, 128}, {130, 32, 128}})
    for (DType act : kActs) {
      const auto xv = in_dtype(randn(n * groups * w, 177, 3.0f), act), zv = in_dtype(randn(n * groups * w, 178, 2.0f), act);
      const auto wv = randn(w, 179, 0.3f);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {n, groups * w}, xv, act), z = put(be, ref, {n, groups * w}, zv, act);
        Tensor wt = put(be, true, {w}, wv, DType::f32);
        Tensor out = poison(be, ref, {n, groups * w}, act);
        be.rms_norm_gated(x, z, wt, 1e-6f, out);
        return {be.to_host(out)};
      };
      check_op("rms_norm_gated", str(n, "x", groups, "x", w), dtype_name(act), run, {{"out", bound_for(act)}});
    }
}

// ---- the families' ops (issue 28) --------------------------------------------------------------
OPS_TEST(Geglu, "geglu") {
  NEED_DEVICE_BACKENDS(devs);
  for (auto [n, inner] : {std::pair<int64_t, int64_t>{1, 11}, {9, 1024}, {130, 344}})
    for (DType act : kActs) {
      const auto gv = in_dtype(randn(n * 2 * inner, 151, 3.0f), act);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor gu = put(be, ref, {n, 2 * inner}, gv, act);
        Tensor out = poison(be, ref, {n, inner}, act);
        be.geglu(gu, out);
        return {be.to_host(out)};
      };
      check_op("geglu", str(n, "x", inner), dts(act, act), run, {{"out", bound_for(act)}});
    }
}

OPS_TEST(Pointwise, "pointwise") {
  NEED_DEVICE_BACKENDS(devs);
  for (auto [op, value] : {std::pair{Backend::Pointwise::multiply, 6.9282f}, {Backend::Pointwise::divide, 8.0f},
                           {Backend::Pointwise::softcap, 30.0f}, {Backend::Pointwise::softcap, 2.0f}})
    for (DType act : kActs) {
      const auto xv = in_dtype(randn(7 * 1001, 152, 20.0f), act);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {7, 1001}, xv, act);
        be.pointwise(x, op, value);
        return {be.to_host(x)};
      };
      check_op("pointwise", str("op ", static_cast<int>(op), " value ", value), dts(act, act), run,
               {{"x", bound_for(act, 1e-6)}});
    }
}

// Qwen3.5's output gates: one a column (gated attention) and one a row (its shared expert's).
OPS_TEST(SigmoidMul, "sigmoid_mul") {
  NEED_DEVICE_BACKENDS(devs);
  for (auto [n, w, g] : {std::tuple<int64_t, int64_t, int64_t>{1, 8, 8}, {37, 2048, 2048}, {9, 1001, 1}})
    for (DType act : kActs) {
      const auto xv = in_dtype(randn(n * w, 181, 3.0f), act), gv = in_dtype(randn(n * g, 182, 4.0f), act);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {n, w}, xv, act), gate = put(be, ref, {n, g}, gv, act);
        be.sigmoid_mul(x, gate);
        return {be.to_host(x)};
      };
      check_op("sigmoid_mul", str(n, "x", w, " gates ", g), dts(act, act), run, {{"x", bound_for(act)}});
    }
}

OPS_TEST(SumSquaresAndColumnNorms, "sum_squares", "rms_norm_cols") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t n, width, col_begin, groups, group_width;
  };
  for (const Case c : {Case{1, 48, 0, 6, 8}, Case{37, 3072, 1024, 16, 128}, Case{5, 768, 512, 1, 256}})
    for (DType act : kActs)
      for (DType wt : {DType::f32, DType::bf16})
        for (bool given : {false, true}) {
          const auto xv = in_dtype(randn(c.n * c.width, 153, 3.0f), act);
          const auto wv = in_dtype(randn(c.group_width, 154), wt);
          OpRun run = [&](Backend& be, bool ref) -> Outputs {
            Tensor x = put(be, ref, {c.n, c.width}, xv, act), w = put(be, ref, {c.group_width}, wv, wt);
            Tensor ss = poison(be, ref, {c.n}, DType::f32);
            be.sum_squares(x, c.col_begin, c.groups * c.group_width, ss);
            if (given && c.groups == 1) {
              be.rms_norm_cols(x, c.col_begin, 1, c.group_width, w, 1e-6f, &ss, 3 * c.group_width);
            } else {
              be.rms_norm_cols(x, c.col_begin, c.groups, c.group_width, w, 1e-6f, nullptr, 0);
            }
            return {be.to_host(ss), be.to_host(x)};
          };
          check_op("rms_norm_cols", str(c.n, "x", c.width, " cols ", c.col_begin, "+", c.groups, "x", c.group_width,
                                        given ? " ss given" : ""),
                   dts(act, wt), run, {{"sum_sq", 1e-5}, {"x", bound_for(act)}});
        }
}

// compressed-tensors' dynamic activations: each row's amax, and x rounded to FP8 or int8 per row
// (its own amax, or a given one: a row split across shards) or per group of columns; and static
// ones: one stored scale for every element (group 1: none given, the checkpoint's 0.02).
OPS_TEST(RowAmaxAndRoundActivations, "row_amax", "round_activations") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t n, width;
  };
  for (const Case c : {Case{1, 16}, Case{7, 300}, Case{33, 1024}})
    for (DType act : kActs)
      for (ActivationFormat f : {ActivationFormat::fp8, ActivationFormat::int8})
        for (int64_t group : {int64_t{-1}, int64_t{0}, int64_t{16}, int64_t{1}}) {  // 0: amax given; 1: static
          const auto xv = in_dtype(randn(c.n * c.width, 157, 3.0f), act);
          OpRun run = [&](Backend& be, bool ref) -> Outputs {
            Tensor x = put(be, ref, {c.n, c.width}, xv, act);
            Tensor amax = poison(be, ref, {c.n}, DType::f32), out = poison(be, ref, {c.n, c.width}, act);
            be.row_amax(x, amax);
            if (group == 0) be.pointwise(amax, Backend::Pointwise::multiply, 1.5f);  // another shard's larger
            ActivationRounding r{f, group == 0 ? -1 : group};
            if (group == 1) r.group = 0, r.stored = true, r.scale = 0.02f;  // (3σ inputs: some clamp)
            be.round_activations(x, r, group == 0 ? &amax : nullptr, out);
            return {be.to_host(amax), be.to_host(out)};
          };
          check_op("round_activations",
                   str(c.n, "x", c.width, f == ActivationFormat::fp8 ? " fp8" : " int8",
                       group < 0 ? " per row" : group == 0 ? " per row, amax given" : group == 1 ? " static" : " per 16"),
                   dts(act, act), run, {{"amax", 0.0, true}, {"out", bound_for(act), act == DType::f32}});
        }
}

OPS_TEST(RopePartialPerTokenScaled, "rope_heads") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t n, total_heads, heads, dim, rotary;
    bool per_token;
    float scale;
  };
  for (const Case c : {Case{1, 4, 4, 96, 72, false, 1.0f}, Case{17, 12, 8, 128, 128, true, 1.2f},
                       Case{300, 6, 4, 256, 128, true, 1.0f}})
    for (DType act : kActs) {
      const int64_t W = c.total_heads * c.dim, half = c.rotary / 2;
      const auto xv = in_dtype(randn(c.n * W, 155), act);
      std::vector<float> inv(static_cast<size_t>((c.per_token ? c.n : 1) * half));
      for (size_t i = 0; i < inv.size(); ++i)
        inv[i] = static_cast<float>(1.0 / std::pow(10000.0 + 37.0 * double(i / half), 2.0 * double(i % half) / double(c.rotary)));
      std::vector<int64_t> pos(static_cast<size_t>(c.n));
      std::mt19937 g(6);
      for (auto& p : pos) p = std::uniform_int_distribution<int64_t>(0, 131071)(g);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {c.n, W}, xv, act);
        Tensor f = c.per_token ? put(be, ref, {c.n, half}, inv, DType::f32) : put(be, ref, {half}, inv, DType::f32);
        Tensor p = put_ints(be, {c.n}, pos);
        be.rope_heads(x, 0, c.heads, c.dim, p, f, c.scale);
        return {be.to_host(x)};
      };
      check_op("rope_heads", str(c.n, " tokens, ", c.heads, " heads D=", c.dim, " R=", c.rotary,
                                 c.per_token ? " per-token" : "", " scale ", c.scale),
               dts(act, DType::f32), run, {{"x", bound_for(act, 1e-6)}});
    }
}

// Sliding windows, soft-capped and rescaled scores, and head dims up to 256 (Gemma), packed
// and through the cache.
OPS_TEST(AttentionWindowSoftcapWideHeads, "attention_packed", "attention_cache") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t q_heads, kv_heads, dim, window;
    float softcap, scale;
  };
  for (const Case c : {Case{8, 4, 256, 0, 0.f, 0.0625f}, Case{8, 4, 256, 100, 50.f, 0.0625f},
                       Case{4, 2, 128, 37, 0.f, 0.f}, Case{6, 3, 64, 1, 0.f, 0.f}, Case{4, 4, 224, 513, 20.f, 0.f}})
    for (DType act : kActs) {
      AttentionDims d;
      d.q_heads = c.q_heads, d.kv_heads = c.kv_heads, d.head_dim = c.dim, d.max_seq = 2048, d.page_size = 64;
      d.window = c.window, d.softcap = c.softcap, d.scale = c.scale;
      std::vector<int64_t> start;
      for (int64_t r : {300, 1, 700})
        for (int64_t i = 0, s = static_cast<int64_t>(start.size()); i < r; ++i) start.push_back(s);
      const int64_t n = static_cast<int64_t>(start.size());
      const auto qkv = in_dtype(randn(n * d.qkv_width(), 156, 1.5f), act);
      OpRun packed = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {n, d.qkv_width()}, qkv, act), rs = put_ints(be, {n}, start);
        Tensor out = poison(be, ref, {n, d.q_heads * d.head_dim}, act);
        be.attention_packed(x, d, rs, out);
        return {be.to_host(out)};
      };
      const std::string name = str("qh=", c.q_heads, " kvh=", c.kv_heads, " D=", c.dim, " window=", c.window,
                                   " softcap=", c.softcap, " scale=", c.scale);
      check_op("attention_packed", name, dtype_name(act), packed, {{"out", bound_for(act)}});
      // The cache: one row's 2048 positions through a shuffled table; tokens at scattered positions.
      const CacheGeom g{c.q_heads, c.kv_heads, c.dim, 2048, 64, 2};
      std::vector<int64_t> table(64);  // 2 rows × 32 pages
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), std::mt19937(7));
      std::vector<int64_t> rows, pos;
      for (int64_t p : {0, 5, 63, 64, 99, 700, 1500, 2047}) rows.push_back(p % 2), pos.push_back(p);
      for (int64_t p = 900; p < 1000; ++p) rows.push_back(1), pos.push_back(p);  // a prefill-like chunk
      const int64_t m = static_cast<int64_t>(rows.size());
      const auto q2 = in_dtype(randn(m * d.qkv_width(), 157, 1.5f), act);
      const auto kc = in_dtype(randn(g.cache_numel(), 158, 1.5f), act);
      const auto vc = in_dtype(randn(g.cache_numel(), 159), act);
      OpRun cache = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {m, d.qkv_width()}, q2, act);
        Tensor r = put_ints(be, {m}, rows), p = put_ints(be, {m}, pos), t = put_ints(be, {2, 32}, table);
        Tensor ck = put(be, ref, g.cache_shape(), kc, act), cv = put(be, ref, g.cache_shape(), vc, act);
        Tensor out = poison(be, ref, {m, d.q_heads * d.head_dim}, act);
        AttentionDims dd = d;
        dd.span = 2048;
        be.attention_cache(x, dd, r, p, t, ck, cv, out);
        return {be.to_host(out)};
      };
      check_op("attention_cache", name, dtype_name(act), cache, {{"out", bound_for(act)}});
    }
}

// ---- mixtures of experts (issue 30) -------------------------------------------------------------
// The router's softmax, torch's top-k (the same experts chosen in the same order, ties included:
// core/top_k.h on both sides), each expert's product over its rows, and the weighted sum.
OPS_TEST(RouterSoftmax, "router_softmax") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t n, e;
  };
  for (const Case c : {Case{1, 8}, Case{17, 64}, Case{5, 128}, Case{300, 8}, Case{3, 1024}})
    for (DType dt : kActs) {
      auto lv = in_dtype(randn(c.n * c.e, 151 + static_cast<uint32_t>(c.e)), dt);
      for (int64_t i = 0; i < c.e; ++i) lv[static_cast<size_t>(i)] = 0.5f;  // row 0: every expert tied
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor l = put(be, ref, {c.n, c.e}, lv, dt), p = poison(be, ref, {c.n, c.e}, DType::f32);
        be.router_softmax(l, p);
        return {be.to_host(p)};
      };
      check_op("router_softmax", str(c.n, "x", c.e), dtype_name(dt), run, {{"probs", 1e-6}});
    }
}

// DeepSeek's choice (core/expert_choice.h): V3's sigmoid + bias over groups scored by their two
// best, V2's given scores over groups scored by their best (masked 0), no groups, and ties
// (logits of a few levels). Experts exact; weights within f32 (expf may differ in the last bit).
OPS_TEST(ChooseExperts, "choose_experts") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t n, e, k, groups, keep;
    bool v3;
  };
  for (const Case c : {Case{1, 8, 2, 4, 2, true}, Case{33, 64, 6, 8, 3, true}, Case{9, 256, 8, 8, 4, true},
                       Case{5, 16, 4, 1, 1, true}, Case{17, 64, 6, 8, 3, false}, Case{3, 160, 6, 1, 1, false}})
    for (bool ties : {false, true}) {
      auto lv = randn(c.n * c.e, 171 + static_cast<uint32_t>(c.e + c.k));
      if (ties)
        for (auto& x : lv) x = std::round(x * 1.5f);
      if (!c.v3)  // V2's scores: a softmax of each row
        for (int64_t r = 0; r < c.n; ++r) {
          double s = 0;
          for (int64_t i = 0; i < c.e; ++i) s += std::exp(double(lv[r * c.e + i]));
          for (int64_t i = 0; i < c.e; ++i) lv[r * c.e + i] = static_cast<float>(std::exp(double(lv[r * c.e + i])) / s);
        }
      const auto bv = randn(c.e, 172, 0.1f);
      ExpertChoice rule;
      rule.sigmoid = c.v3, rule.groups = c.groups, rule.keep_groups = c.keep, rule.group_top2 = c.v3;
      rule.masked = c.v3 ? -INFINITY : 0.0f, rule.normalize = c.v3, rule.scale = 2.5f, rule.weights_of_choices = !c.v3;
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor l = put(be, ref, {c.n, c.e}, lv, DType::f32), b = put(be, ref, {c.e}, bv, DType::f32);
        Tensor w = poison(be, ref, {c.n, c.k}, DType::f32), ix = poison(be, ref, {c.n, c.k}, DType::i32);
        be.choose_experts(l, c.v3 ? &b : nullptr, rule, c.k, w, ix);
        return {be.to_host(w), be.to_host(ix)};
      };
      check_op("choose_experts", str(c.n, "x", c.e, " k=", c.k, " groups ", c.keep, "/", c.groups, c.v3 ? " v3" : " v2",
                                     ties ? " ties" : ""),
               "f32", run, {{"weights", 1e-6}, {"experts", 0, true}});
    }
}

OPS_TEST(TopK, "top_k") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t n, e, k;
  };
  for (const Case c : {Case{1, 8, 2}, Case{33, 8, 3}, Case{9, 64, 8}, Case{5, 128, 8}, Case{7, 128, 2}, Case{4, 16, 16}})
    for (bool normalize : {false, true})
      for (bool ties : {false, true}) {
        // Probabilities as a router makes them; with ties, from logits of a few levels (many
        // experts tied, the order torch.topk leaves them in matters).
        auto lv = randn(c.n * c.e, 161 + static_cast<uint32_t>(c.e + c.k));
        if (ties)
          for (auto& x : lv) x = std::round(x * 1.5f);
        std::vector<float> pv(lv.size());
        for (int64_t r = 0; r < c.n; ++r) {
          double mx = -1e30, s = 0;
          for (int64_t i = 0; i < c.e; ++i) mx = std::max(mx, double(lv[r * c.e + i]));
          for (int64_t i = 0; i < c.e; ++i) s += std::exp(lv[r * c.e + i] - mx);
          for (int64_t i = 0; i < c.e; ++i) pv[r * c.e + i] = static_cast<float>(std::exp(lv[r * c.e + i] - mx) / s);
        }
        OpRun run = [&](Backend& be, bool ref) -> Outputs {
          Tensor p = put(be, ref, {c.n, c.e}, pv, DType::f32);
          Tensor w = poison(be, ref, {c.n, c.k}, DType::f32), ix = poison(be, ref, {c.n, c.k}, DType::i32);
          be.top_k(p, c.k, normalize, w, ix);
          return {be.to_host(w), be.to_host(ix)};
        };
        check_op("top_k", str(c.n, "x", c.e, " k=", c.k, normalize ? " norm" : "", ties ? " ties" : ""), "f32", run,
                 {{"weights", 0, true}, {"experts", 0, true}});
      }
}

OPS_TEST(GroupedMatmul, "grouped_matmul") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    std::vector<int64_t> offsets;
    int64_t in, out;
  };
  const Case cases[] = {{{0, 1}, 64, 48},
                        {{0, 3, 3, 40, 41}, 129, 33},       // an empty group; groups of 3, 37, 1
                        {{0, 0, 0, 70, 70, 200}, 256, 130},  // leading empty groups
                        {{0, 5, 10, 15, 20, 25, 30, 35, 40}, 64, 1}};
  struct Types {
    DType x, w;
  };
  uint32_t seed = 170;
  for (const Case& c : cases)
    for (const Types t : {Types{DType::f32, DType::f32}, Types{DType::bf16, DType::bf16}, Types{DType::f16, DType::f16},
                          Types{DType::f32, DType::bf16}}) {
      const int64_t m = c.offsets.back(), groups = static_cast<int64_t>(c.offsets.size()) - 1;
      const auto xv = in_dtype(randn(m * c.in, ++seed), t.x);
      const auto wv = in_dtype(randn(groups * c.out * c.in, ++seed, 0.05f), t.w);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {m, c.in}, xv, t.x), w = put(be, ref, {groups * c.out, c.in}, wv, t.w);
        Tensor y = poison(be, ref, {m, c.out}, t.x);
        be.grouped_matmul(x, w, c.offsets, y);
        return {be.to_host(y)};
      };
      check_op("grouped_matmul", str(groups, " groups of ", m, " rows, ", c.in, "->", c.out), dts(t.x, t.w), run,
               {{"out", bound_for(t.x, 2e-5)}});
    }
  // Batch invariance on the device: a row alone in its group gives the bits it gets among 60.
  for (auto& be : devs) {
    const int64_t in = 200, out = 96;
    const auto xv = randn(61 * in, 181), wv = randn(2 * out * in, 182, 0.05f);
    for (DType dt : kActs) {
      Tensor x = be->upload(Tensor::from_floats({61, in}, xv, dt));
      Tensor w = be->upload(Tensor::from_floats({2 * out, in}, wv, dt));
      Tensor all = be->empty({61, out}, dt), one = be->empty({1, out}, dt);
      be->grouped_matmul(x, w, {0, 1, 61}, all);
      be->grouped_matmul(x.rows(30, 31), w.rows(out, 2 * out), {0, 1}, one);
      EXPECT_TRUE(same_bytes(be->to_host(all).rows(30, 31).clone(), be->to_host(one))) << dtype_name(dt);
    }
  }
}

// ---- quantized matrices (core/quantized_parts.h, core/cuda/quantized_weights.cuh) ------------
namespace {

// A quantized matrix's parts as a checkpoint stores them, and its weights dequantized on the
// host by the format's own rule (the f32 matrix the product must equal).
struct QuantCase {
  std::string name;
  WeightLayout layout;
  std::vector<Backend::QuantizedPart> parts;
  std::vector<float> dequantized;  // [rows, cols]
  int64_t rows, cols;
};

Tensor host_bytes(Shape s, DType dt, const std::vector<uint8_t>& v) {
  Tensor t = Tensor::empty(std::move(s), dt);
  std::memcpy(t.data(), v.data(), v.size());
  return t;
}

QuantCase quant_case_unrounded(const std::string& fmt, int64_t rows, int64_t cols, uint32_t seed);

// rows × cols in `name`'s format, groups (blocks) of 16 columns (MXFP4: 32), random values and
// scales; a name ending " f16" or " bf16" rounds each dequantized weight to that dtype (GPTQ's
// and AWQ's f16; compressed-tensors' on a 16-bit model: WeightLayout::dequant_dtype).
QuantCase quant_case(const std::string& name, int64_t rows, int64_t cols, uint32_t seed) {
  for (const DType t : {DType::bf16, DType::f16}) {
    const std::string tail = std::string(" ") + dtype_name(t);
    if (name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0) {
      QuantCase c = quant_case_unrounded(name.substr(0, name.size() - tail.size()), rows, cols, seed);
      c.name = name;
      c.layout.dequant_dtype = t;
      for (float& w : c.dequantized) w = round_to(t, w);
      return c;
    }
  }
  return quant_case_unrounded(name, rows, cols, seed);
}

QuantCase quant_case_unrounded(const std::string& fmt, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> byte(0, 255), nib(0, 15), e8(118, 130);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  QuantCase c{fmt, {}, {}, std::vector<float>(static_cast<size_t>(rows * cols)), rows, cols};
  const int64_t gs = 16, groups = cols / gs;
  if (fmt == "fp8 8x16") {
    c.layout = WeightLayout::fp8_blocks(8, 16);
    std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
    for (auto& b : q) do b = static_cast<uint8_t>(byte(g)); while ((b & 0x7f) == 0x7f);  // no NaN
    const int64_t br = (rows + 7) / 8;
    std::vector<float> sc(static_cast<size_t>(br * groups));
    for (auto& v : sc) v = scale(g);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k)
        c.dequantized[r * cols + k] = f8_e4m3_to_f32(q[r * cols + k]) * sc[(r / 8) * groups + k / gs];
    c.parts.push_back({host_bytes({rows, cols}, DType::f8_e4m3, q), Tensor::from_floats({br, groups}, sc), Tensor(), cols});
  } else if (fmt == "int8 g16") {
    c.layout = WeightLayout::int8_groups(16);
    std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
    for (auto& b : q) b = static_cast<uint8_t>(byte(g));
    std::vector<float> sc(static_cast<size_t>(rows * groups));
    for (auto& v : sc) v = scale(g);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k)
        c.dequantized[r * cols + k] =
            static_cast<float>(static_cast<int8_t>(q[r * cols + k])) * sc[r * groups + k / gs];
    c.parts.push_back({host_bytes({rows, cols}, DType::i8, q), Tensor::from_floats({rows, groups}, sc), Tensor(), cols});
  } else if (fmt == "int4 asym g16 act-order" || fmt == "int4 sym g16") {
    const bool asym = fmt.find("asym") != std::string::npos, reordered = asym;
    c.layout = WeightLayout::int4_groups(16, !asym, reordered);
    std::vector<uint32_t> words(static_cast<size_t>(rows * cols / 8), 0), zw(static_cast<size_t>((rows + 7) / 8 * groups), 0);
    std::vector<uint8_t> q(static_cast<size_t>(rows * cols)), z(static_cast<size_t>(rows * groups), 8);
    for (auto& v : q) v = static_cast<uint8_t>(nib(g));
    if (asym)
      for (auto& v : z) v = static_cast<uint8_t>(nib(g));
    std::vector<float> sc(static_cast<size_t>(rows * groups));
    for (auto& v : sc) v = round_to(DType::f16, scale(g));
    std::vector<int32_t> gidx(static_cast<size_t>(cols));
    for (int64_t k = 0; k < cols; ++k) gidx[k] = static_cast<int32_t>(reordered ? (k * 7 + 3) % groups : k / gs);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) {
        words[r * (cols / 8) + k / 8] |= uint32_t{q[r * cols + k]} << (4 * (k % 8));
        const int64_t b = r * groups + gidx[k];
        c.dequantized[r * cols + k] = (static_cast<float>(q[r * cols + k]) - static_cast<float>(z[b])) * sc[b];
      }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < groups; ++b) zw[(r / 8) * groups + b] |= uint32_t{z[r * groups + b]} << (4 * (r % 8));
    Backend::QuantizedPart p;
    p.data = Tensor::empty({rows, cols / 8}, DType::i32);
    std::memcpy(p.data.data(), words.data(), words.size() * 4);
    p.scales = Tensor::from_floats({rows, groups}, sc);
    if (asym) {
      p.zero_points = Tensor::empty({(rows + 7) / 8, groups}, DType::i32);
      std::memcpy(p.zero_points.data(), zw.data(), zw.size() * 4);
    }
    if (reordered) p.group_index = Tensor::from_ints({cols}, std::vector<int64_t>(gidx.begin(), gidx.end()), DType::i32);
    p.cols = cols;
    c.parts.push_back(p);
  } else {  // "mxfp4"
    c.layout = WeightLayout::mxfp4_blocks();
    static const float kE2M1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    const int64_t blocks = cols / 32;
    std::vector<uint8_t> packed(static_cast<size_t>(rows * cols / 2), 0), e(static_cast<size_t>(rows * blocks));
    for (auto& v : e) v = static_cast<uint8_t>(e8(g));
    e[0] = 0;  // 2^-127: f32's subnormal
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) {
        const int code = nib(g);
        packed[r * (cols / 2) + k / 2] |= static_cast<uint8_t>(code << (4 * (k % 2)));
        const float m = kE2M1[code & 7];
        c.dequantized[r * cols + k] = (code & 8 ? -m : m) * f8_e8m0_to_f32(e[r * blocks + k / 32]);
      }
    c.parts.push_back({host_bytes({rows, cols / 2}, DType::u8, packed), host_bytes({rows, blocks}, DType::f8_e8m0, e),
                       Tensor(), cols});
  }
  return c;
}

const char* const kQuantFormats[] = {"fp8 8x16",        "int8 g16",      "int4 asym g16 act-order",
                                     "int4 sym g16 f16", "mxfp4",         "fp8 8x16 bf16",
                                     "fp8 8x16 f16",     "int8 g16 bf16", "int4 asym g16 act-order bf16"};

}  // namespace

// The cases' host dequantization is the CPU's: its quantized product has the bits of its dense
// product on those weights (act-order: its columns summed in their groups' order, so within
// f32's rounding). Runs without a device: the device case below leans on it.
TEST(BackendOps, QuantizedCasesDequantizeAsTheCpuDoes) {
  auto cpu = make_cpu_backend();
  uint32_t seed = 900;
  for (const char* fmt : kQuantFormats) {
    const int64_t rows = 96, cols = 128, n = 37;
    const QuantCase c = quant_case(fmt, rows, cols, ++seed);
    const auto xv = randn(n * cols, ++seed);
    Tensor x = Tensor::from_floats({n, cols}, xv);
    Tensor wq = cpu->upload_quantized_matrix(c.parts, c.layout);
    Tensor wd = cpu->upload_matrix(Tensor::from_floats({rows, cols}, c.dequantized));
    Tensor yq = Tensor::empty({n, rows}, DType::f32), yd = Tensor::empty({n, rows}, DType::f32);
    cpu->matmul(x, wq, nullptr, yq);
    cpu->matmul(x, wd, nullptr, yd);
    const auto a = yq.to_floats(), b = yd.to_floats();
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
    if (std::string(fmt).find("act-order") != std::string::npos)
      EXPECT_LT(std::sqrt(num / den), 1e-6) << fmt;
    else
      EXPECT_TRUE(same_bytes(yq, yd)) << fmt << ": " << std::sqrt(num / den);
  }
}

// Every format's product is the dense product on its dequantized weights: on the CPU within
// f32's bound of it (the CPU sums in its own order); on the device bit for bit against the
// device's own dense product (the same SIMT tile, the weights read through the format), for
// any N (a row alone gives its bits among 37), through a view of rows, and grouped.
OPS_TEST(QuantizedMatmul, "matmul", "grouped_matmul") {
  NEED_DEVICE_BACKENDS(devs);
  uint32_t seed = 900;
  for (const char* fmt : kQuantFormats) {
    const int64_t rows = 96, cols = 128, n = 37;
    const QuantCase c = quant_case(fmt, rows, cols, ++seed);
    const auto xv = randn(n * cols, ++seed);
    for (DType xt : {DType::f32, DType::bf16}) {
      const auto xq = in_dtype(xv, xt);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor x = put(be, ref, {n, cols}, xq, xt);
        Tensor w = be.upload_quantized_matrix(c.parts, c.layout);
        Tensor y = poison(be, ref, {n, rows}, ref ? DType::f32 : xt);
        be.matmul(x, w, nullptr, y);
        Tensor yv = poison(be, ref, {n, 32}, ref ? DType::f32 : xt);  // rows [64, 96) through a view
        be.matmul(x, w.rows(64, 96), nullptr, yv);
        return {be.to_host(y), be.to_host(yv)};
      };
      check_op("matmul", str("quantized ", n, "x", cols, "->", rows), str("x=", dtype_name(xt), ",w=", fmt), run,
               {{"out", bound_for(xt, 2e-5)}, {"rows 64..96", bound_for(xt, 2e-5)}});
    }
    for (auto& be : devs) {
      Tensor x = be->upload(Tensor::from_floats({n, cols}, xv));
      Tensor wq = be->upload_quantized_matrix(c.parts, c.layout);
      Tensor wd = be->upload(Tensor::from_floats({rows, cols}, c.dequantized));
      Tensor yq = be->empty({n, rows}, DType::f32), yd = be->empty({n, rows}, DType::f32);
      Tensor one = be->empty({1, rows}, DType::f32), view = be->empty({n, 32}, DType::f32);
      be->matmul(x, wq, nullptr, yq);
      be->matmul(x, wd, nullptr, yd);
      be->matmul(x.rows(5, 6), wq, nullptr, one);
      be->matmul(x, wq.rows(64, 96), nullptr, view);
      const Tensor hq = be->to_host(yq), hd = be->to_host(yd);
      EXPECT_TRUE(same_bytes(hq, hd)) << fmt << ": the quantized product is not the dense one on its weights";
      EXPECT_TRUE(same_bytes(hq.rows(5, 6).clone(), be->to_host(one))) << fmt << ": a row alone differs";
      const auto hv = be->to_host(view).to_floats(), all = hq.to_floats();
      for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 0; o < 32; ++o)
          ASSERT_EQ(hv[r * 32 + o], all[r * rows + 64 + o]) << fmt << ": a view of rows [64, 96) differs at " << r << ", " << o;
      // Grouped: three groups of 32 weight rows (the matrix as three experts).
      const std::vector<int64_t> offsets = {0, 10, 10, n};
      Tensor gq = be->empty({n, 32}, DType::f32), gd = be->empty({n, 32}, DType::f32);
      be->grouped_matmul(x, wq, offsets, gq);
      be->grouped_matmul(x, wd, offsets, gd);
      EXPECT_TRUE(same_bytes(be->to_host(gq), be->to_host(gd))) << fmt << ": grouped, not the dense product's bits";
      // Tensor cores: where the dequantized weights are values of a 16-bit x's dtype (the
      // weights rounded to it by their format; MXFP4's beside bf16), the quantized product is
      // the dense tensor-core product on them, bit for bit, in the split-K family (37 rows) and
      // the wide one (100), and a row alone (1) gives its bits among either.
      const std::string name = fmt;
      const DType t = name == "mxfp4" || name.ends_with(" bf16") ? DType::bf16 : DType::f16;
      if (name != "mxfp4" && !name.ends_with(" bf16") && !name.ends_with(" f16")) continue;
      const int64_t wide_n = 100;
      const auto xw = in_dtype(randn(wide_n * cols, seed + 7), t);
      Tensor x16 = be->upload(Tensor::from_floats({wide_n, cols}, xw, t));
      Tensor wd16 = be->upload(Tensor::from_floats({rows, cols}, c.dequantized, t));
      for (const int64_t m : {wide_n, n, int64_t{1}}) {
        Tensor xm = x16.rows(0, m);
        Tensor a = be->empty({m, rows}, t), b = be->empty({m, rows}, t);
        be->matmul(xm, wq, nullptr, a);
        be->matmul(xm, wd16, nullptr, b);
        const Tensor ha = be->to_host(a);
        EXPECT_TRUE(same_bytes(ha, be->to_host(b))) << fmt << " x " << dtype_name(t) << ", " << m
                                                    << " rows: not the dense tensor-core product's bits";
        Tensor first = be->empty({1, rows}, t);
        be->matmul(x16.rows(0, 1), wq, nullptr, first);
        EXPECT_TRUE(same_bytes(ha.rows(0, 1).clone(), be->to_host(first)))
            << fmt << " x " << dtype_name(t) << ": row 0 alone differs from it among " << m;
        Tensor part = be->empty({m, 32}, t);  // rows [64, 96) through a view
        be->matmul(xm, wq.rows(64, 96), nullptr, part);
        const auto hp = be->to_host(part).to_floats(), whole = ha.to_floats();
        for (int64_t r = 0; r < m; ++r)
          for (int64_t o = 0; o < 32; ++o)
            ASSERT_EQ(hp[r * 32 + o], whole[r * rows + 64 + o]) << fmt << " x " << dtype_name(t) << ": a view differs";
      }
    }
  }
}

namespace {

// matmul_rounded's roundings: FP8 and int8 per token (its own amax, and a larger one given: a
// row split across shards), FP8 per group of 16 columns, FP8 static (the checkpoint's scale).
struct RoundedCase {
  const char* name;
  ActivationRounding rounding;
  bool amax_given;
};
const RoundedCase kRoundedCases[] = {
    {"fp8 per token", {ActivationFormat::fp8, -1}, false},
    {"fp8 per token, amax given", {ActivationFormat::fp8, -1}, true},
    {"fp8 per 16", {ActivationFormat::fp8, 16}, false},
    {"fp8 static", {ActivationFormat::fp8, 0, true, 0.02f}, false},
    {"int8 per token", {ActivationFormat::int8, -1}, false},
};

// out = round_activations(x) · wᵀ + bias by matmul_rounded, or by the two ops in turn.
Tensor rounded_product(Backend& be, const Tensor& x, const RoundedCase& rc, const Tensor& w, const Tensor& bias,
                       DType out_dt, bool two_ops) {
  Tensor amax;
  if (rc.amax_given) {
    amax = be.empty({x.dim(0)}, DType::f32);
    be.row_amax(x, amax);
    be.pointwise(amax, Backend::Pointwise::multiply, 1.5f);  // another shard's larger
  }
  Tensor y = be.empty({x.dim(0), w.dim(0)}, out_dt);
  const Tensor* a = amax.defined() ? &amax : nullptr;
  if (two_ops) {
    Tensor xr = be.empty(x.shape(), x.dtype());
    be.round_activations(x, rc.rounding, a, xr);
    be.matmul(xr, w, &bias, y);
  } else {
    be.matmul_rounded(x, rc.rounding, a, w, &bias, y);
  }
  return y;
}

}  // namespace

// Runs without a device: on the CPU, matmul_rounded is round_activations then matmul, bit for
// bit, on dense and quantized weights; a rounding it cannot take is refused under its name.
TEST(BackendOps, MatmulRoundedIsTheTwoOpsOnTheCpu) {
  auto cpu = make_cpu_backend();
  const int64_t rows = 96, cols = 128, n = 37;
  uint32_t seed = 950;
  for (const char* fmt : {"fp8 8x16", "int8 g16", "int4 sym g16 f16"}) {
    const QuantCase c = quant_case(fmt, rows, cols, ++seed);
    Tensor wq = cpu->upload_quantized_matrix(c.parts, c.layout);
    Tensor wd = cpu->upload_matrix(Tensor::from_floats({rows, cols}, c.dequantized));
    Tensor x = Tensor::from_floats({n, cols}, randn(n * cols, ++seed, 3.0f));
    Tensor bias = Tensor::from_floats({rows}, randn(rows, ++seed));
    for (const RoundedCase& rc : kRoundedCases)
      for (const Tensor* w : {&wq, &wd}) {
        const Tensor a = rounded_product(*cpu, x, rc, *w, bias, DType::f32, false);
        const Tensor b = rounded_product(*cpu, x, rc, *w, bias, DType::f32, true);
        EXPECT_TRUE(same_bytes(a, b)) << fmt << ", " << rc.name << (w == &wq ? ", quantized" : ", dense");
      }
    Tensor y = Tensor::empty({n, rows}, DType::f32), amax = Tensor::empty({n}, DType::f32);
    try {
      cpu->matmul_rounded(x, {ActivationFormat::fp8, 16}, &amax, wq, nullptr, y);
      ADD_FAILURE() << "a row's amax for a rounding per group was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("matmul_rounded: row_amax"), std::string::npos) << e.what();
    }
  }
}

// On a device (its default switches), against the CPU within the product's bound; and the
// device's own two ops' bits.
OPS_TEST(MatmulRounded, "matmul_rounded") {
  NEED_DEVICE_BACKENDS(devs);
  const int64_t rows = 96, cols = 128, n = 37;
  uint32_t seed = 960;
  for (const char* fmt : {"fp8 8x16", "int8 g16", "fp8 8x16 bf16"}) {
    const QuantCase c = quant_case(fmt, rows, cols, ++seed);
    const auto xv = randn(n * cols, ++seed, 3.0f), bv = randn(rows, ++seed);
    for (DType xt : {DType::f32, DType::bf16})
      for (const RoundedCase& rc : kRoundedCases) {
        const auto xq = in_dtype(xv, xt);
        OpRun run = [&](Backend& be, bool ref) -> Outputs {
          Tensor x = put(be, ref, {n, cols}, xq, xt), bias = put(be, ref, {rows}, bv, xt);
          Tensor w = be.upload_quantized_matrix(c.parts, c.layout);
          return {be.to_host(rounded_product(be, x, rc, w, bias, ref ? DType::f32 : xt, false))};
        };
        check_op("matmul_rounded", str(n, "x", cols, "->", rows, ", ", rc.name), str("x=", dtype_name(xt), ",w=", fmt),
                 run, {{"out", bound_for(xt, 2e-5)}});
        for (auto& be : devs) {
          Tensor x = be->upload(Tensor::from_floats({n, cols}, xq, xt)), bias = be->upload(Tensor::from_floats({rows}, bv, xt));
          Tensor w = be->upload_quantized_matrix(c.parts, c.layout);
          EXPECT_TRUE(same_bytes(be->to_host(rounded_product(*be, x, rc, w, bias, xt, false)),
                                 be->to_host(rounded_product(*be, x, rc, w, bias, xt, true))))
              << fmt << ", " << rc.name << ", x " << dtype_name(xt) << ": not the two ops' bits";
        }
      }
  }
}

OPS_TEST(MoeCombine, "moe_combine") {
  NEED_DEVICE_BACKENDS(devs);
  struct Case {
    int64_t n, k, h;
  };
  for (const Case c : {Case{1, 2, 48}, Case{17, 3, 64}, Case{40, 8, 33}})
    for (DType dt : kActs) {
      const int64_t m = c.n * c.k;
      const auto yv = in_dtype(randn(m * c.h, 190 + static_cast<uint32_t>(c.k)), dt);
      std::vector<int64_t> rows(static_cast<size_t>(m)), experts(static_cast<size_t>(m));
      std::iota(rows.begin(), rows.end(), 0);
      std::shuffle(rows.begin(), rows.end(), std::mt19937(5));
      std::mt19937 g(6);
      for (int64_t t = 0; t < c.n; ++t) {
        std::vector<int64_t> e(64);
        std::iota(e.begin(), e.end(), 0);
        std::shuffle(e.begin(), e.end(), g);
        for (int64_t j = 0; j < c.k; ++j) experts[t * c.k + j] = e[static_cast<size_t>(j)];  // distinct per token
      }
      if (c.n > 1) rows[static_cast<size_t>(c.k)] = -1;  // token 1's first choice left out
      const auto wv = randn(m, 199, 0.5f);
      OpRun run = [&](Backend& be, bool ref) -> Outputs {
        Tensor y = put(be, ref, {m, c.h}, yv, dt), out = poison(be, ref, {c.n, c.h}, dt);
        Tensor r = put_ints(be, {c.n, c.k}, rows), e = put_ints(be, {c.n, c.k}, experts);
        Tensor w = put(be, ref, {c.n, c.k}, wv, DType::f32);
        be.moe_combine(y, r, e, w, out);
        return {be.to_host(out)};
      };
      // f32: the same rounded products added in the same order — the same bits.
      check_op("moe_combine", str(c.n, " tokens x ", c.k, " of ", c.h), dtype_name(dt), run,
               {{"out", 1e-2, dt == DType::f32}});
    }
}

// Runs without a GPU: an op added to core/backend_op_list.h without a test here fails.
TEST(BackendOps, EveryListedOpHasACase) {
  int listed = 0;
#define LINNET_OP(name, label, params, args)                                            \
  ++listed;                                                                             \
  EXPECT_TRUE(covered_ops().count(#name) || covered_ops().count(label))                 \
      << #name " (core/backend_op_list.h) has no test in tests/backend_ops_test.cpp (OPS_TEST)";
#include "core/backend_op_list.h"
#undef LINNET_OP
  EXPECT_GT(listed, 0);
}
