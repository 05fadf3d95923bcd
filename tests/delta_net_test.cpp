// Gated DeltaNet's ops on the CPU (causal_conv1d, gated_delta_rule, rms_norm_gated) against
// transformers 5.24's own functions (tests/fixtures/delta_net_ops, written by
// tools/golden/make_delta_net_ops.py), and the property the engine relies on: a token's result
// does not depend on what other rows shared its call, nor on how its row's tokens were cut into
// calls where the cuts fall on the aligned chunks' boundaries (multiples of 64) — bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "checkpoint/safetensors.h"
#include "core/backend.h"

using namespace linnet;

namespace {

const SafetensorsFile& cases() {
  static const SafetensorsFile f(std::string(LINNET_BUILD_SOURCE_DIR) + "/tests/fixtures/delta_net_ops/cases.safetensors");
  return f;
}

// max |got − want| / max |want|.
double rel_error(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.numel(), want.numel());
  double err = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got.ptr<float>()[i]) - want.ptr<float>()[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want.ptr<float>()[i])));
  }
  return err / scale;
}

// Tensors of N(0, scale²) values from a seeded generator.
struct Normals {
  explicit Normals(unsigned seed) : rng(seed) {}
  Tensor operator()(Shape s, float scale) {
    std::vector<float> v(static_cast<size_t>(s.numel()));
    for (float& x : v) x = normal(rng) * scale;
    return Tensor::from_floats(s, v);
  }
  std::mt19937 rng;
  std::normal_distribution<float> normal;
};

Tensor rows_of(const std::vector<int64_t>& rows) {
  return Tensor::from_ints({static_cast<int64_t>(rows.size())}, rows, DType::i32);
}

// Positions first, first + 1, …: n of them.
Tensor positions_from(int64_t first, int64_t n) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(first + i);
  return rows_of(p);
}

Tensor slice_rows(const Tensor& t, int64_t begin, int64_t end) {
  Tensor out = Tensor::empty({end - begin, t.dim(1)}, t.dtype());
  std::memcpy(out.data(), static_cast<const char*>(t.data()) + begin * t.dim(1) * 4, out.nbytes());
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) { return a.nbytes() == b.nbytes() && !std::memcmp(a.data(), b.data(), a.nbytes()); }

DeltaNetDims dims_of_cases() {
  const Tensor d = cases().read("rule.dims");
  const int32_t* v = d.ptr<int32_t>();
  return {v[0], v[1], v[2], v[3]};
}

}  // namespace

TEST(DeltaNetOps, ConvolutionMatchesTransformers) {
  auto be = make_cpu_backend();
  const Tensor x = cases().read("conv.x"), w = cases().read("conv.weight");
  const int64_t n = x.dim(0), c = x.dim(1), k = w.dim(1);
  Tensor state = Tensor::zeros({1, c, k - 1}, DType::f32), out = Tensor::empty({n, c}, DType::f32);
  be->causal_conv1d(x, w, rows_of(std::vector<int64_t>(static_cast<size_t>(n), 0)), Tensor(), state, out);
  const double err = rel_error(out, cases().read("conv.out"));
  EXPECT_LT(err, 1e-6);
  std::printf("causal_conv1d: %lld tokens × %lld channels, kernel %lld: %.2e of transformers' (relative)\n",
              static_cast<long long>(n), static_cast<long long>(c), static_cast<long long>(k), err);
  // The state holds the last K − 1 inputs.
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t j = 0; j < k - 1; ++j)
      ASSERT_EQ(state.ptr<float>()[ch * (k - 1) + j], x.ptr<float>()[(n - (k - 1) + j) * c + ch]);
}

// The fixture's 150 tokens from position 0: two aligned chunks and 22 tokens. With positions the
// op runs the chunks by the chunked form, as transformers does (which also runs the 22 so, padded);
// without, every token by the recurrent form.
TEST(DeltaNetOps, DeltaRuleMatchesTransformersChunkedAndRecurrent) {
  auto be = make_cpu_backend();
  const DeltaNetDims d = dims_of_cases();
  const Tensor qkv = cases().read("rule.qkv"), ab = cases().read("rule.ab");
  const Tensor a_log = cases().read("rule.a_log"), dt_bias = cases().read("rule.dt_bias");
  const int64_t t1 = cases().read("rule.out_recurrent").dim(0), all = qkv.dim(0), width = d.value_heads * d.value_dim;
  const Tensor want_chunked = cases().read("rule.out_chunked"), want_recurrent = cases().read("rule.out_recurrent");
  ASSERT_GE(t1, 2 * kDeltaRuleChunk);
  for (const bool chunked : {true, false}) {
    Tensor state = Tensor::zeros({1, d.value_heads, d.key_dim, d.value_dim}, DType::f32);
    Tensor out = Tensor::empty({t1, width}, DType::f32);
    const Tensor rows = rows_of(std::vector<int64_t>(static_cast<size_t>(t1), 0));
    be->gated_delta_rule(slice_rows(qkv, 0, t1), slice_rows(ab, 0, t1), a_log, dt_bias, rows,
                         chunked ? positions_from(0, t1) : Tensor(), Tensor(), d, state, out);
    const int64_t whole = t1 / kDeltaRuleChunk * kDeltaRuleChunk;  // the aligned chunks' tokens
    const double rec = rel_error(out, want_recurrent);
    const double chunks = rel_error(slice_rows(out, 0, whole), slice_rows(want_chunked, 0, whole));
    const double all_chunked = rel_error(out, want_chunked);
    const double st = rel_error(state, cases().read("rule.state_chunked").reshape({1, d.value_heads, d.key_dim, d.value_dim}));
    // The chunked form reassociates the sums as transformers' chunked rule does, in an order of
    // its own (each f32 rounding amplified a little by T's solve): within 1e-5 of either rule.
    EXPECT_LT(chunks, 1e-5);
    EXPECT_LT(rec, 1e-5);
    EXPECT_LT(all_chunked, 1e-4);
    EXPECT_LT(st, 1e-4);
    // Decoding on from the state, as transformers does token by token.
    Tensor more = Tensor::empty({all - t1, width}, DType::f32);
    be->gated_delta_rule(slice_rows(qkv, t1, all), slice_rows(ab, t1, all), a_log, dt_bias,
                         rows_of(std::vector<int64_t>(static_cast<size_t>(all - t1), 0)),
                         chunked ? positions_from(t1, all - t1) : Tensor(), Tensor(), d, state, more);
    const double cont = rel_error(more, cases().read("rule.out_continued"));
    EXPECT_LT(cont, 1e-4);
    std::printf("gated_delta_rule (%lld key heads of %lld, %lld value heads of %lld), %lld tokens, %s: %.2e of "
                "transformers' recurrent rule, %.2e of its chunked one (%.2e over the %lld tokens of whole chunks), "
                "final state %.2e; %lld more tokens: %.2e\n",
                static_cast<long long>(d.key_heads), static_cast<long long>(d.key_dim),
                static_cast<long long>(d.value_heads), static_cast<long long>(d.value_dim), static_cast<long long>(t1),
                chunked ? "aligned chunks chunked" : "all recurrent", rec, all_chunked, chunks,
                static_cast<long long>(whole), st, static_cast<long long>(all - t1), cont);
  }
}

// The chunked form against the recurrent one on random inputs: several chunks, a state carried in,
// more value heads than key heads; and each chunk's keep (inside it and at its end).
TEST(DeltaNetOps, TheChunkedFormGivesTheRecurrentFormsResult) {
  auto be = make_cpu_backend();
  for (const DeltaNetDims& d : {DeltaNetDims{2, 16, 4, 8}, DeltaNetDims{1, 32, 3, 24}}) {
    const int64_t n = 3 * kDeltaRuleChunk + 5, width = d.value_heads * d.value_dim;
    Normals randn(21);
    const Tensor qkv = randn({2 * n, d.qkv_width()}, 1.0f), ab = randn({2 * n, 2 * d.value_heads}, 2.0f);
    const Tensor a_log = randn({d.value_heads}, 0.5f), dt_bias = randn({d.value_heads}, 0.5f);
    std::vector<int64_t> keep(static_cast<size_t>(n), -1);
    keep[40] = 1;                     // inside the first chunk
    keep[kDeltaRuleChunk - 1] = 2;    // at its end
    keep[kDeltaRuleChunk + 17] = 3;   // inside the second
    struct Run {
      Tensor state, first, second;
    };
    auto run = [&](bool chunked) {
      Run r{Tensor::zeros({4, d.value_heads, d.key_dim, d.value_dim}, DType::f32), Tensor::empty({n, width}, DType::f32),
            Tensor::empty({n, width}, DType::f32)};
      const Tensor rows = rows_of(std::vector<int64_t>(static_cast<size_t>(n), 0));
      // Positions 0 … n − 1, then (the state carried in) n … 2n − 1 — the second call's chunks
      // start at 256 − n past its start.
      be->gated_delta_rule(slice_rows(qkv, 0, n), slice_rows(ab, 0, n), a_log, dt_bias, rows,
                           chunked ? positions_from(0, n) : Tensor(), rows_of(keep), d, r.state, r.first);
      be->gated_delta_rule(slice_rows(qkv, n, 2 * n), slice_rows(ab, n, 2 * n), a_log, dt_bias, rows,
                           chunked ? positions_from(n, n) : Tensor(), Tensor(), d, r.state, r.second);
      return r;
    };
    const Run chunked = run(true), recurrent = run(false);
    const double first = rel_error(chunked.first, recurrent.first), second = rel_error(chunked.second, recurrent.second);
    EXPECT_LT(first, 1e-5);
    EXPECT_LT(second, 1e-5);
    for (int64_t k = 0; k < 4; ++k) EXPECT_LT(rel_error(chunked.state.rows(k, k + 1), recurrent.state.rows(k, k + 1)), 1e-5) << k;
    EXPECT_FALSE(same_bits(chunked.first, recurrent.first));  // the chunked form did run
    // The keep at the chunk's end is the state of a call that stops there, to the bit; keeping
    // changes nothing else.
    Tensor alone = Tensor::zeros({1, d.value_heads, d.key_dim, d.value_dim}, DType::f32);
    Tensor out64 = Tensor::empty({kDeltaRuleChunk, width}, DType::f32);
    be->gated_delta_rule(slice_rows(qkv, 0, kDeltaRuleChunk), slice_rows(ab, 0, kDeltaRuleChunk), a_log, dt_bias,
                         rows_of(std::vector<int64_t>(kDeltaRuleChunk, 0)), positions_from(0, kDeltaRuleChunk), Tensor(),
                         d, alone, out64);
    EXPECT_TRUE(same_bits(chunked.state.rows(2, 3), alone));
    EXPECT_TRUE(same_bits(slice_rows(chunked.first, 0, kDeltaRuleChunk), out64));
    std::printf("chunked vs recurrent (%lld/%lld key/value heads of %lld/%lld), %lld + %lld tokens: %.2e, %.2e\n",
                static_cast<long long>(d.key_heads), static_cast<long long>(d.value_heads),
                static_cast<long long>(d.key_dim), static_cast<long long>(d.value_dim), static_cast<long long>(n),
                static_cast<long long>(n), first, second);
  }
}

TEST(DeltaNetOps, GatedNormMatchesTransformers) {
  auto be = make_cpu_backend();
  const Tensor x = cases().read("norm.x"), z = cases().read("norm.z"), w = cases().read("norm.weight");
  // Four heads a row: the op normalizes each group of w's width.
  const Tensor xs = x.reshape({x.dim(0) / 4, 4 * x.dim(1)}), zs = z.reshape(xs.shape());
  Tensor out = Tensor::empty(xs.shape(), DType::f32);
  be->rms_norm_gated(xs, zs, w, 1e-6f, out);
  EXPECT_LT(rel_error(out, cases().read("norm.out")), 1e-6);
}

// A row's tokens in one call, or cut at multiples of 64 and anywhere past its last whole chunk, or
// interleaved with another row's: the same bits. Cut inside an aligned chunk, that chunk runs by
// the recurrent form: the same result within float rounding, not the same bits.
TEST(DeltaNetOps, ResultsDoNotDependOnCutsOrCompany) {
  auto be = make_cpu_backend();
  const DeltaNetDims d{2, 8, 6, 4};
  const int64_t n = 2 * kDeltaRuleChunk + 10, kernel = 4, c = d.qkv_width();
  Normals randn(5);
  const Tensor x = randn({2 * n, c}, 1.0f), w = randn({c, kernel}, 0.5f), ab = randn({2 * n, 2 * d.value_heads}, 2.0f);
  const Tensor a_log = randn({d.value_heads}, 0.5f), dt_bias = randn({d.value_heads}, 0.5f);
  // Row 0 takes tokens [0, n), row 1 tokens [n, 2n).
  struct Run {
    Tensor conv_state, rule_state, conv, out;
  };
  auto run = [&](const std::vector<std::vector<int64_t>>& calls) {  // each call: token indices, in order
    Run r{Tensor::zeros({2, c, kernel - 1}, DType::f32), Tensor::zeros({2, d.value_heads, d.key_dim, d.value_dim}, DType::f32),
          Tensor::zeros({2 * n, c}, DType::f32), Tensor::zeros({2 * n, d.value_heads * d.value_dim}, DType::f32)};
    for (const auto& call : calls) {
      const int64_t m = static_cast<int64_t>(call.size());
      Tensor xi = Tensor::empty({m, c}, DType::f32), abi = Tensor::empty({m, 2 * d.value_heads}, DType::f32);
      std::vector<int64_t> rows, positions;
      for (int64_t i = 0; i < m; ++i) {
        positions.push_back(call[static_cast<size_t>(i)] % n);
        std::memcpy(xi.ptr<float>() + i * c, x.ptr<float>() + call[static_cast<size_t>(i)] * c, 4 * c);
        std::memcpy(abi.ptr<float>() + i * 2 * d.value_heads, ab.ptr<float>() + call[static_cast<size_t>(i)] * 2 * d.value_heads,
                    8 * d.value_heads);
        rows.push_back(call[static_cast<size_t>(i)] / n);
      }
      Tensor conv = Tensor::empty({m, c}, DType::f32), out = Tensor::empty({m, d.value_heads * d.value_dim}, DType::f32);
      be->causal_conv1d(xi, w, rows_of(rows), Tensor(), r.conv_state, conv);
      be->gated_delta_rule(conv, abi, a_log, dt_bias, rows_of(rows), rows_of(positions), Tensor(), d, r.rule_state, out);
      for (int64_t i = 0; i < m; ++i) {
        std::memcpy(r.conv.ptr<float>() + call[static_cast<size_t>(i)] * c, conv.ptr<float>() + i * c, 4 * c);
        const int64_t ow = d.value_heads * d.value_dim;
        std::memcpy(r.out.ptr<float>() + call[static_cast<size_t>(i)] * ow, out.ptr<float>() + i * ow, 4 * ow);
      }
    }
    return r;
  };
  auto range = [](int64_t a, int64_t b) {
    std::vector<int64_t> v;
    for (int64_t i = a; i < b; ++i) v.push_back(i);
    return v;
  };
  const Run alone = run({range(0, n), range(n, 2 * n)});
  // Cut at 64 and 128, and at 129 and 133 past the last whole chunk; and both rows in each call,
  // interleaved token by token.
  const Run cut = run({range(0, 64), range(n, n + 128), range(64, 128), range(128, 129), range(n + 128, n + 133),
                       range(129, n), range(n + 133, 2 * n)});
  std::vector<int64_t> mixed;
  for (int64_t i = 0; i < n; ++i) {
    mixed.push_back(i);
    mixed.push_back(n + i);
  }
  const Run together = run({mixed});
  for (const Run* r : {&cut, &together}) {
    EXPECT_TRUE(same_bits(r->conv, alone.conv));
    EXPECT_TRUE(same_bits(r->out, alone.out));
    EXPECT_TRUE(same_bits(r->conv_state, alone.conv_state));
    EXPECT_TRUE(same_bits(r->rule_state, alone.rule_state));
  }
  // Cut at 1, 17 and 70: the first chunks of both rows run token by token.
  const Run inside = run({range(0, 1), range(n, n + 17), range(1, 17), range(17, 70), range(n + 17, 2 * n), range(70, n)});
  EXPECT_TRUE(same_bits(inside.conv, alone.conv));
  EXPECT_LT(rel_error(inside.out, alone.out), 1e-5);
  EXPECT_LT(rel_error(inside.rule_state, alone.rule_state), 1e-5);
  EXPECT_FALSE(same_bits(inside.out, alone.out));
}

// A kept snapshot (keep[t] = row 2) is the row's state exactly as it stood after token t: the
// same bits as a call that stops at t; the row itself goes on unchanged by the keeping.
TEST(DeltaNetOps, AKeptSnapshotIsTheStateAfterItsToken) {
  auto be = make_cpu_backend();
  const DeltaNetDims d{2, 8, 6, 4};
  const int64_t n = 40, at = 23, kernel = 4, c = d.qkv_width();
  Normals randn(11);
  const Tensor x = randn({n, c}, 1.0f), w = randn({c, kernel}, 0.5f), ab = randn({n, 2 * d.value_heads}, 2.0f);
  const Tensor a_log = randn({d.value_heads}, 0.5f), dt_bias = randn({d.value_heads}, 0.5f);
  struct State {
    Tensor conv, rule;
  };
  auto run = [&](int64_t count, const Tensor& keep) {
    State s{Tensor::zeros({3, c, kernel - 1}, DType::f32), Tensor::zeros({3, d.value_heads, d.key_dim, d.value_dim}, DType::f32)};
    const Tensor rows = rows_of(std::vector<int64_t>(static_cast<size_t>(count), 1));
    Tensor conv = Tensor::empty({count, c}, DType::f32), out = Tensor::empty({count, d.value_heads * d.value_dim}, DType::f32);
    be->causal_conv1d(slice_rows(x, 0, count), w, rows, keep, s.conv, conv);
    be->gated_delta_rule(conv, slice_rows(ab, 0, count), a_log, dt_bias, rows, positions_from(0, count), keep, d, s.rule,
                         out);
    return s;
  };
  std::vector<int64_t> keep(static_cast<size_t>(n), -1);
  keep[static_cast<size_t>(at - 1)] = 2;  // after the at-th token
  const State kept = run(n, rows_of(keep)), stopped = run(at, Tensor()), whole = run(n, Tensor());
  EXPECT_TRUE(same_bits(kept.conv.rows(2, 3), stopped.conv.rows(1, 2)));
  EXPECT_TRUE(same_bits(kept.rule.rows(2, 3), stopped.rule.rows(1, 2)));
  EXPECT_TRUE(same_bits(kept.conv.rows(1, 2), whole.conv.rows(1, 2)));
  EXPECT_TRUE(same_bits(kept.rule.rows(1, 2), whole.rule.rows(1, 2)));
  EXPECT_FALSE(same_bits(kept.rule.rows(2, 3), whole.rule.rows(1, 2)));
}

TEST(DeltaNetOps, BadArgumentsAreRefusedByName) {
  auto be = make_cpu_backend();
  const DeltaNetDims d{2, 8, 6, 4};
  Tensor qkv = Tensor::zeros({3, d.qkv_width()}, DType::f32), ab = Tensor::zeros({3, 12}, DType::f32);
  Tensor v = Tensor::zeros({6}, DType::f32), state = Tensor::zeros({1, 6, 8, 4}, DType::f32);
  Tensor out = Tensor::zeros({3, 24}, DType::f32);
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  std::string m = message([&] { be->gated_delta_rule(qkv, ab, v, v, rows_of({0, 0, 1}), Tensor(), Tensor(), d, state, out); });
  EXPECT_NE(m.find("rows[2] = 1 outside the state's 1 rows"), std::string::npos) << m;
  m = message([&] { be->gated_delta_rule(qkv, ab, v, v, rows_of({0, 0, 0}), Tensor(), Tensor(), DeltaNetDims{4, 8, 6, 4}, state, out); });
  EXPECT_NE(m.find("value heads a multiple of key heads"), std::string::npos) << m;
  m = message([&] { be->gated_delta_rule(qkv, ab, v, v, rows_of({0, 0, 0}), rows_of({0, 1}), Tensor(), d, state, out); });
  EXPECT_NE(m.find("positions"), std::string::npos) << m;
  EXPECT_NE(m.find("should hold 3 entries"), std::string::npos) << m;
  Tensor conv_state = Tensor::zeros({1, d.qkv_width(), 2}, DType::f32), w = Tensor::zeros({d.qkv_width(), 4}, DType::f32);
  Tensor conv = Tensor::zeros({3, d.qkv_width()}, DType::f32);
  m = message([&] { be->causal_conv1d(qkv, w, rows_of({0, 0, 0}), Tensor(), conv_state, conv); });
  EXPECT_NE(m.find("state"), std::string::npos) << m;
  EXPECT_NE(m.find("should be [rows, 56, 3]"), std::string::npos) << m;
  m = message([&] { be->causal_conv1d(qkv, Tensor::zeros({d.qkv_width(), 3}, DType::f32), rows_of({0, 0, 0}), Tensor(), conv_state, qkv); });
  EXPECT_NE(m.find("not alias"), std::string::npos) << m;
  // A snapshot row that a token of the call runs on, or outside the state.
  m = message([&] { be->gated_delta_rule(qkv, ab, v, v, rows_of({0, 0, 0}), Tensor(), rows_of({-1, 0, -1}), d, state, out); });
  EXPECT_NE(m.find("keep[1] = 0 is not −1 or a row of the state's 1 that no token of the call runs on"), std::string::npos)
      << m;
  Tensor conv_state3 = Tensor::zeros({1, d.qkv_width(), 3}, DType::f32);
  m = message([&] { be->causal_conv1d(qkv, w, rows_of({0, 0, 0}), rows_of({3, -1, -1}), conv_state3, conv); });
  EXPECT_NE(m.find("keep[0] = 3"), std::string::npos) << m;
}

// Tensor parallelism's split (docs/design.md, issue 40): a shard holds a range of key heads with
// their value heads — their q, k and v conv channels, b and a, A_log and dt_bias. Each shard's
// ops on its slices give the whole run's columns, bit for bit (nothing is summed across heads).
TEST(DeltaNetOps, AShardsHeadsGiveTheWholeRunsColumns) {
  auto be = make_cpu_backend();
  const DeltaNetDims d{4, 8, 8, 4};
  const int64_t n = kDeltaRuleChunk + 23, kernel = 4, c = d.qkv_width(), kd = d.key_heads * d.key_dim,
                vd = d.value_heads * d.value_dim;
  Normals randn(9);
  const Tensor x = randn({n, c}, 1.0f), w = randn({c, kernel}, 0.5f), ab = randn({n, 2 * d.value_heads}, 2.0f);
  const Tensor a_log = randn({d.value_heads}, 0.5f), dt_bias = randn({d.value_heads}, 0.5f);
  const Tensor z = randn({n, vd}, 1.0f), nw = randn({d.value_dim}, 0.3f);
  const Tensor rows = rows_of(std::vector<int64_t>(static_cast<size_t>(n), 0));
  auto run = [&](const DeltaNetDims& dd, const Tensor& xs, const Tensor& ws, const Tensor& abs, const Tensor& al,
                 const Tensor& dtb, const Tensor& zs) {
    Tensor conv_state = Tensor::zeros({1, dd.qkv_width(), kernel - 1}, DType::f32);
    Tensor state = Tensor::zeros({1, dd.value_heads, dd.key_dim, dd.value_dim}, DType::f32);
    Tensor conv = Tensor::empty({n, dd.qkv_width()}, DType::f32);
    Tensor out = Tensor::empty({n, dd.value_heads * dd.value_dim}, DType::f32), normed = Tensor::empty(out.shape(), DType::f32);
    be->causal_conv1d(xs, ws, rows, Tensor(), conv_state, conv);
    be->gated_delta_rule(conv, abs, al, dtb, rows, positions_from(0, n), Tensor(), dd, state, out);  // a chunk and 23
    be->rms_norm_gated(out, zs, nw, 1e-6f, normed);
    return normed;
  };
  const Tensor whole = run(d, x, w, ab, a_log, dt_bias, z);
  // Columns [begin, begin + width) of each row of t, for each (begin, width).
  auto columns = [&](const Tensor& t, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
    int64_t width = 0;
    for (auto [b, wd] : ranges) width += wd;
    Tensor out = Tensor::empty({t.dim(0), width}, DType::f32);
    for (int64_t r = 0; r < t.dim(0); ++r) {
      int64_t at = 0;
      for (auto [b, wd] : ranges) {
        std::memcpy(out.ptr<float>() + r * width + at, t.ptr<float>() + r * t.dim(1) + b, 4 * wd);
        at += wd;
      }
    }
    return out;
  };
  const int64_t shards = 2, kh = d.key_heads / shards, vh = d.value_heads / shards;
  for (int64_t s = 0; s < shards; ++s) {
    const DeltaNetDims ds{kh, d.key_dim, vh, d.value_dim};
    const int64_t k0 = s * kh * d.key_dim, v0 = s * vh * d.value_dim, kw = kh * d.key_dim, vw = vh * d.value_dim;
    const std::vector<std::pair<int64_t, int64_t>> channels = {{k0, kw}, {kd + k0, kw}, {2 * kd + v0, vw}};
    const Tensor xs = columns(x, channels);
    const Tensor ws = columns(w.reshape({1, c * kernel}), {{k0 * kernel, kw * kernel}, {(kd + k0) * kernel, kw * kernel},
                                                          {(2 * kd + v0) * kernel, vw * kernel}})
                          .reshape({2 * kw + vw, kernel});
    const Tensor abs = columns(ab, {{s * vh, vh}, {d.value_heads + s * vh, vh}});
    const Tensor al = columns(a_log.reshape({1, d.value_heads}), {{s * vh, vh}}).reshape({vh});
    const Tensor dtb = columns(dt_bias.reshape({1, d.value_heads}), {{s * vh, vh}}).reshape({vh});
    const Tensor got = run(ds, xs, ws, abs, al, dtb, columns(z, {{v0, vw}}));
    EXPECT_TRUE(same_bits(got, columns(whole, {{v0, vw}}))) << "shard " << s;
  }
}
