// The CPU backend against plain float64 definitions written out here.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>

#include "core/backend.h"
#include "core/cpu/attention_kernels.h"
#include "core/cpu/packed_matmul.h"
#include "core/philox.h"

using namespace linnet;

namespace {
std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
double rel_err(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}
}  // namespace

TEST(CpuBackend, MatmulWithBias) {
  auto be = make_cpu_backend();
  for (int64_t n : {1, 5}) {
    const int64_t in = 37, out = 23;
    auto xv = randn(n * in, 1), wv = randn(out * in, 2), bv = randn(out, 3);
    Tensor x = Tensor::from_floats({n, in}, xv), w = Tensor::from_floats({out, in}, wv),
           b = Tensor::from_floats({out}, bv), y = Tensor::empty({n, out}, DType::f32);
    be->matmul(x, w, &b, y);
    std::vector<double> ref(n * out);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < out; ++c) {
        double s = bv[c];
        for (int64_t k = 0; k < in; ++k) s += double(xv[r * in + k]) * wv[c * in + k];
        ref[r * out + c] = s;
      }
    EXPECT_LT(rel_err(y.to_floats(), ref), 1e-6) << n;
  }
}

TEST(CpuBackend, RmsNormAndFusedAdd) {
  auto be = make_cpu_backend();
  const int64_t n = 3, h = 16;
  auto xv = randn(n * h, 4), dv = randn(n * h, 5), wv = randn(h, 6);
  Tensor res = Tensor::from_floats({n, h}, xv), delta = Tensor::from_floats({n, h}, dv),
         w = Tensor::from_floats({h}, wv), out = Tensor::empty({n, h}, DType::f32);
  be->add_rms_norm(res, delta, w, 1e-5f, out);
  std::vector<double> ref(n * h);
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < h; ++i) ss += std::pow(double(xv[r * h + i]) + dv[r * h + i], 2);
    const double inv = 1 / std::sqrt(ss / h + 1e-5);
    for (int64_t i = 0; i < h; ++i) ref[r * h + i] = (double(xv[r * h + i]) + dv[r * h + i]) * inv * wv[i];
  }
  EXPECT_LT(rel_err(out.to_floats(), ref), 1e-6);
}

TEST(CpuBackend, RopeRotatesHalves) {
  auto be = make_cpu_backend();
  const int64_t d = 8, heads = 2;
  auto xv = randn(2 * 3 * d, 7);  // 2 tokens, 3 heads; rotate heads 1..2
  Tensor x = Tensor::from_floats({2, 3 * d}, xv);
  Tensor pos = Tensor::from_ints({2}, {0, 5});
  std::vector<float> f = {1.0f, 0.1f, 0.01f, 0.001f};
  be->rope(x, 1, heads, pos, Tensor::from_floats({4}, f));
  auto y = x.to_floats();
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < 3; ++h)
      for (int i = 0; i < 4; ++i) {
        const float* v = &xv[t * 3 * d + h * d];
        const double ang = h == 0 ? 0.0 : double(float(t == 0 ? 0 : 5) * f[i]);
        EXPECT_NEAR(y[t * 3 * d + h * d + i], v[i] * std::cos(ang) - v[i + 4] * std::sin(ang), 1e-5);
        EXPECT_NEAR(y[t * 3 * d + h * d + i + 4], v[i + 4] * std::cos(ang) + v[i] * std::sin(ang), 1e-5);
      }
}

// Packed attention over a run equals cache attention after writing the run into a
// shuffled page table, and both equal the float64 definition.
TEST(CpuBackend, AttentionPackedEqualsCacheEqualsReference) {
  auto be = make_cpu_backend();
  AttentionDims d{4, 2, 8, 16, 4};  // 4 q heads, 2 kv heads, head dim 8, MaxSeq 16, pages of 4
  const int64_t n = 7, w = d.qkv_width();
  auto qv = randn(n * w, 8);
  Tensor qkv = Tensor::from_floats({n, w}, qv);
  std::vector<int64_t> start(n, 0);
  Tensor out_p = Tensor::zeros({n, d.q_heads * d.head_dim}, DType::f32);
  be->attention_packed(qkv, d, Tensor::from_ints({n}, start), out_p);

  // Two cache rows: 8 pages; logical row 1 uses physical pages 6, 1 (shuffled).
  Tensor ck = Tensor::zeros({2, d.kv_heads, d.max_seq, d.head_dim}, DType::f32), cv = ck.clone();
  std::vector<int64_t> table = {0, 2, 3, 4, 6, 1, 5, 7}, slots(n), rows(n, 1), pos(n);
  for (int64_t t = 0; t < n; ++t) {
    pos[t] = t;
    slots[t] = table[4 + t / 4] * 4 + t % 4;
  }
  be->kv_write(qkv, d, Tensor::from_ints({n}, slots), ck, cv);
  Tensor out_c = Tensor::zeros({n, d.q_heads * d.head_dim}, DType::f32);
  be->attention_cache(qkv, d, Tensor::from_ints({n}, rows), Tensor::from_ints({n}, pos),
                      Tensor::from_ints({2, 4}, table), ck, cv, out_c);

  std::vector<double> ref(n * d.q_heads * d.head_dim);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < d.q_heads; ++h) {
      const int64_t g = h / 2;
      std::vector<double> s(t + 1);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < d.head_dim; ++i)
          dot += double(qv[t * w + h * 8 + i]) * qv[j * w + (4 + g) * 8 + i];
        s[j] = dot / std::sqrt(8.0);
        mx = std::max(mx, s[j]);
      }
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int64_t i = 0; i < d.head_dim; ++i) {
        double acc = 0;
        for (int64_t j = 0; j <= t; ++j) acc += s[j] / sum * qv[j * w + (6 + g) * 8 + i];
        ref[t * 32 + h * 8 + i] = acc;
      }
    }
  EXPECT_LT(rel_err(out_p.to_floats(), ref), 1e-6);
  EXPECT_LT(rel_err(out_c.to_floats(), ref), 1e-6);
}

// A KV cache narrower than f32 (--kv-cache-dtype bf16, f16, fp8): kv_write stores K and V rounded,
// attention_cache widens them exactly, and attention_packed with round_kv rounds the K and V it
// reads from qkv alike. So both paths give the bits of the f32 paths on a qkv whose K and V were
// rounded first, whichever path a token's keys take.
TEST(CpuBackend, ANarrowerCacheRoundsKeysAndValuesAlikeOnEveryPath) {
  auto be = make_cpu_backend();
  const int64_t n = 7;
  for (const DType ct : {DType::bf16, DType::f16, DType::f8_e4m3}) {
    AttentionDims d{4, 2, 8, 16, 4};
    const int64_t w = d.qkv_width();
    auto qv = randn(n * w, 9);
    for (auto& v : qv) v *= 3.0f;  // (FP8: some values past its subnormals, none past ±448)
    const Tensor qkv = Tensor::from_floats({n, w}, qv);
    std::vector<float> rv = qv;  // K and V rounded to the cache's dtype, q as it is
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = d.q_heads * d.head_dim; c < w; ++c) rv[t * w + c] = round_to(ct, rv[t * w + c]);
    const Tensor rounded = Tensor::from_floats({n, w}, rv);
    EXPECT_NE(rv, qv) << dtype_name(ct);

    std::vector<int64_t> start(n, 0), table = {0, 2, 3, 4, 6, 1, 5, 7}, slots(n), rows(n, 1), pos(n);
    for (int64_t t = 0; t < n; ++t) pos[t] = t, slots[t] = table[4 + t / 4] * 4 + t % 4;
    auto run = [&](const Tensor& x, const AttentionDims& dims, DType cache, bool packed) {
      Tensor out = Tensor::zeros({n, d.q_heads * d.head_dim}, DType::f32);
      if (packed) {
        be->attention_packed(x, dims, Tensor::from_ints({n}, start), out);
        return out.to_floats();
      }
      Tensor ck = Tensor::zeros({2, d.kv_heads, d.max_seq, d.head_dim}, cache), cv = ck.clone();
      be->kv_write(x, dims, Tensor::from_ints({n}, slots), ck, cv);
      be->attention_cache(x, dims, Tensor::from_ints({n}, rows), Tensor::from_ints({n}, pos),
                          Tensor::from_ints({2, 4}, table), ck, cv, out);
      return out.to_floats();
    };
    AttentionDims narrow = d;
    narrow.round_kv = ct;
    const std::vector<float> want_packed = run(rounded, d, DType::f32, true), want_cache = run(rounded, d, DType::f32, false);
    EXPECT_EQ(run(qkv, narrow, DType::f32, true), want_packed) << dtype_name(ct);
    EXPECT_EQ(run(qkv, narrow, ct, false), want_cache) << dtype_name(ct);
    EXPECT_LT(rel_err(want_cache, std::vector<double>(want_packed.begin(), want_packed.end())), 1e-6) << dtype_name(ct);
  }
  // Only float caches the kernels widen.
  AttentionDims d{4, 2, 8, 16, 4};
  Tensor bad = Tensor::zeros({2, d.kv_heads, d.max_seq, d.head_dim}, DType::i32), bad_v = bad.clone();
  const Tensor qkv = Tensor::zeros({1, d.qkv_width()}, DType::f32);
  EXPECT_THROW(be->kv_write(qkv, d, Tensor::from_ints({1}, std::vector<int64_t>{0}), bad, bad_v), Error);
  EXPECT_TRUE(be->supports_cache(DType::f8_e4m3, DType::f32));
  EXPECT_FALSE(be->supports_cache(DType::i8, DType::f32));
}

// Random123's known-answer vectors for philox4x32-10.
TEST(Philox, KnownAnswers) {
  using philox::U32x4;
  auto a = philox::philox4x32_10(U32x4{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(a.v[0], 0x6627e8d5u);
  EXPECT_EQ(a.v[1], 0xe169c58du);
  EXPECT_EQ(a.v[2], 0xbc57ac4cu);
  EXPECT_EQ(a.v[3], 0x9b00dbd8u);
  auto b = philox::philox4x32_10(U32x4{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
                                 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(b.v[0], 0x408f276du);
  EXPECT_EQ(b.v[3], 0x6d5451fdu);
  auto c = philox::philox4x32_10(U32x4{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                                 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(c.v[0], 0xd16cfe09u);
  EXPECT_EQ(c.v[1], 0x94fdccebu);
  EXPECT_EQ(c.v[2], 0x5001e420u);
  EXPECT_EQ(c.v[3], 0x24126ea1u);
  // u stays strictly inside (0, 1) even at the extremes of the 24-bit draw.
  EXPECT_LT((double((1u << 24) - 1) + 0.5) / 16777216.0, 1.0);
}

TEST(CpuBackend, VocabShardOps) {
  auto be = make_cpu_backend();
  // Two rows of a shard of 5 columns, 4 of them real, at global offset 10.
  Tensor logits = Tensor::from_floats({2, 5}, {1, 3, 3, 0, 99, -1, -2, -3, -4, 99});
  Tensor v = Tensor::empty({2}, DType::f32), i = Tensor::empty({2}, DType::i32);
  be->argmax(logits, 4, 10, v, i);
  EXPECT_EQ(i.to_ints(), (std::vector<int64_t>{11, 10}));  // tie at 11/12: lowest index
  Tensor mx = Tensor::empty({2}, DType::f32), se = mx.clone(), tl = mx.clone();
  be->logit_stats(logits, 4, 10, Tensor::from_ints({2}, {12, 3}), mx, se, tl);
  EXPECT_FLOAT_EQ(mx.to_floats()[0], 3);
  EXPECT_NEAR(se.to_floats()[0], std::exp(-2.0) + 2 + std::exp(-3.0), 1e-6);
  EXPECT_EQ(tl.to_floats(), (std::vector<float>{3, 0}));
}

// The one CPU product (core/cpu/packed_matmul.h): weights packed as stored (f32, bf16, f16),
// against a double-precision product on the same weights; every kernel this CPU has gives the
// same bits; a row's result is the same bits alone or among others, and in a view that starts
// inside a panel (a tied lm_head's shard).
TEST(CpuPackedMatmul, EveryKernelGivesTheSameBitsWhateverTheRows) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  auto be = make_cpu_backend();
  const std::vector<const char*> kernels = cpu::packed_matmul_kernels();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (int64_t in : {1, 15, 16, 37, 128}) {
      const int64_t o = 45, row0 = 7, rows = 29;  // rows [7, 36) of 45: two partial panels
      std::vector<float> wf(static_cast<size_t>(o * in));
      for (auto& v : wf) v = nd(rng);
      const Tensor w = Tensor::from_floats({o, in}, wf).to(dt), wide = w.to(DType::f32);
      const Tensor packed = be->upload_matrix(w);
      EXPECT_EQ(be->to_host(packed).to_floats(), wide.to_floats()) << "unpacked " << dtype_name(dt);
      const Tensor view = packed.rows(row0, row0 + rows);
      const int64_t n_max = 40;
      std::vector<float> xf(static_cast<size_t>(n_max * in));
      for (auto& v : xf) v = nd(rng);
      const Tensor x = Tensor::from_floats({n_max, in}, xf);
      // Row 0 alone: the bits every other call must give for it.
      Tensor alone = Tensor::empty({1, rows}, DType::f32);
      be->matmul(x.rows(0, 1), view, nullptr, alone);
      for (int64_t n : {1, 3, 12, 13, 40}) {
        for (const char* k : kernels) {
          if (std::string(k) == "scalar" && n > 3) continue;  // slow; its bits are checked at n ≤ 3
          Tensor got = Tensor::empty({n, rows}, DType::f32);
          cpu::packed_matmul(x.ptr<float>(), n, in, packed.storage()->data, dt, row0, rows, got.ptr<float>(), k);
          for (int64_t c = 0; c < rows; ++c)
            ASSERT_EQ(got.ptr<float>()[c], alone.ptr<float>()[c]) << dtype_name(dt) << " kernel " << k << " n " << n;
          for (int64_t i = 0; i < n * rows; ++i) {
            const int64_t r = i / rows, c = i % rows;
            double want = 0, scale = 0;
            for (int64_t t = 0; t < in; ++t) {
              const double p = static_cast<double>(xf[r * in + t]) * wide.ptr<float>()[(row0 + c) * in + t];
              want += p;
              scale += std::abs(p);
            }
            ASSERT_NEAR(got.ptr<float>()[i], want, 1e-6 * scale + 1e-30)
                << dtype_name(dt) << " kernel " << k << " n " << n << " in " << in << " at " << i;
          }
        }
      }
      // A row-major weight given straight to matmul is packed for the call: the same bits.
      Tensor direct = Tensor::empty({1, rows}, DType::f32);
      be->matmul(x.rows(0, 1), w.rows(row0, row0 + rows).clone(), nullptr, direct);
      EXPECT_EQ(direct.to_floats(), alone.to_floats()) << dtype_name(dt);
    }
  }
}

// LINNET_CPU_DOT=bf16 (core/cpu/packed_matmul.h): bf16 weights by AVX512_BF16's dot product, x
// rounded to bf16. Its own family of bits: a row's result is the same alone or among others and in
// a view that starts inside a panel, for odd and even k; and it is the exact product of the
// rounded x and the weights to f32's accumulation (the products are exact in f32).
TEST(CpuPackedMatmul, Bf16DotIsBatchInvariantAndExactOnRoundedActivations) {
  if (!cpu::has_bf16_dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(6);
  std::normal_distribution<float> nd;
  auto be = make_cpu_backend();
  for (int64_t in : {1, 2, 15, 16, 37, 128, 4097}) {
    const int64_t o = 45, row0 = 7, rows = 29;
    std::vector<float> wf(static_cast<size_t>(o * in));
    for (auto& v : wf) v = nd(rng);
    const Tensor w = Tensor::from_floats({o, in}, wf).to(DType::bf16), wide = w.to(DType::f32);
    const Tensor packed = be->upload_matrix(w);
    const int64_t n_max = 40;
    std::vector<float> xf(static_cast<size_t>(n_max * in));
    for (auto& v : xf) v = nd(rng);
    std::vector<float> alone(static_cast<size_t>(rows));
    cpu::packed_matmul_bf16_dot(xf.data(), 1, in, packed.storage()->data, row0, rows, alone.data());
    for (int64_t n : {1, 3, 12, 13, 40}) {
      std::vector<float> got(static_cast<size_t>(n * rows));
      cpu::packed_matmul_bf16_dot(xf.data(), n, in, packed.storage()->data, row0, rows, got.data());
      for (int64_t c = 0; c < rows; ++c) ASSERT_EQ(got[c], alone[c]) << "in " << in << " n " << n;
      for (int64_t i = 0; i < n * rows; ++i) {
        const int64_t r = i / rows, c = i % rows;
        double want = 0, scale = 0;
        for (int64_t t = 0; t < in; ++t) {
          const double xr = bf16_to_f32(f32_to_bf16(xf[r * in + t]));
          const double p = xr * wide.ptr<float>()[(row0 + c) * in + t];
          want += p;
          scale += std::abs(p);
        }
        ASSERT_NEAR(got[i], want, 2e-6 * scale + 1e-30) << "in " << in << " n " << n << " at " << i;
      }
    }
  }
}

// The attention loops (core/cpu/attention_kernels.h): every kernel this CPU has against the
// portable one, over head dims with and without a tail and runs of keys with and without one.
TEST(CpuAttentionKernels, EveryKernelAgreesWithThePortableOne) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  const auto kernels = cpu::all_attention_kernels();
  const cpu::AttentionKernels& ref = *kernels.back();
  ASSERT_STREQ(ref.name, "portable");
  for (int64_t d : {8, 48, 64, 128, 136}) {
    for (int64_t count : {1, 3, 17, 100}) {
      const int64_t ldk = d + 5;
      std::vector<float> q(static_cast<size_t>(d)), keys(static_cast<size_t>(count * ldk)), vals(keys.size());
      for (auto* v : {&q, &keys, &vals})
        for (auto& x : *v) x = 3 * nd(rng);
      std::vector<const float*> vp;
      for (int64_t j = 0; j < count; ++j) vp.push_back(vals.data() + j * ldk);
      auto run = [&](const cpu::AttentionKernels& k, std::vector<float>& s, std::vector<float>& out) {
        s.assign(static_cast<size_t>(count), 0);
        out.assign(static_cast<size_t>(d), 0);
        k.scores(q.data(), keys.data(), ldk, count, d, 0.125f, s.data());
        const float inv = k.softmax(s.data(), count);
        k.combine(s.data(), vp.data(), count, d, inv, out.data());
        for (auto& p : s) p *= inv;
      };
      std::vector<float> want_s, want_o;
      run(ref, want_s, want_o);
      for (const auto* k : kernels) {
        std::vector<float> s, o;
        run(*k, s, o);
        for (int64_t j = 0; j < count; ++j) ASSERT_NEAR(s[j], want_s[j], 2e-6 + 2e-6 * want_s[j]) << k->name << " d " << d << " key " << j;
        for (int64_t i = 0; i < d; ++i) ASSERT_NEAR(o[i], want_o[i], 2e-5) << k->name << " d " << d << " count " << count;
      }
    }
  }
}

// ---- the families' ops (issue 28) ------------------------------------------------------------

// Sliding window, scale and soft-cap: packed and cache attention (through a shuffled page
// table whose pages before the window hold garbage) against the float64 definition.
TEST(CpuBackend, AttentionWindowScaleSoftcap) {
  auto be = make_cpu_backend();
  for (auto [window, softcap, scale] : {std::tuple<int64_t, float, float>{3, 0.f, 0.f}, {5, 1.5f, 0.3f}, {0, 2.f, 0.f}}) {
    SCOPED_TRACE(str("window ", window, " softcap ", softcap, " scale ", scale));
    AttentionDims d{4, 2, 8, 16, 4};
    d.window = window, d.softcap = softcap, d.scale = scale;
    const int64_t n = 11, w = d.qkv_width();
    auto qv = randn(n * w, 18, 2.0f);
    Tensor qkv = Tensor::from_floats({n, w}, qv);
    // Two runs: tokens 0…3 and 4…10.
    std::vector<int64_t> start(n);
    for (int64_t t = 0; t < n; ++t) start[t] = t < 4 ? 0 : 4;
    Tensor out_p = Tensor::zeros({n, d.q_heads * d.head_dim}, DType::f32);
    be->attention_packed(qkv, d, Tensor::from_ints({n}, start), out_p);
    // The second run (7 tokens) through the cache at positions 0…6 of logical row 0.
    Tensor ck = Tensor::from_floats({2, d.kv_heads, d.max_seq, d.head_dim}, randn(2 * 2 * 16 * 8, 19, 100.f));
    Tensor cv = Tensor::from_floats({2, d.kv_heads, d.max_seq, d.head_dim}, randn(2 * 2 * 16 * 8, 20, 100.f));
    std::vector<int64_t> table = {6, 1, 3, 0, 2, 4, 5, 7};
    Tensor run = Tensor::from_floats({7, w}, std::vector<float>(qv.begin() + 4 * w, qv.end()));
    std::vector<int64_t> slots(7), rows(7, 0), pos(7);
    for (int64_t t = 0; t < 7; ++t) pos[t] = t, slots[t] = table[t / 4] * 4 + t % 4;
    be->kv_write(run, d, Tensor::from_ints({7}, slots), ck, cv);
    Tensor out_c = Tensor::zeros({7, d.q_heads * d.head_dim}, DType::f32);
    be->attention_cache(run, d, Tensor::from_ints({7}, rows), Tensor::from_ints({7}, pos),
                        Tensor::from_ints({2, 4}, table), ck, cv, out_c);
    std::vector<double> ref(n * 32);
    const double sc = scale != 0 ? scale : 1 / std::sqrt(8.0);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < 4; ++h) {
        const int64_t g = h / 2, lo = std::max<int64_t>(start[t], window ? t - window + 1 : 0);
        std::vector<double> s;
        double mx = -1e300, sum = 0;
        for (int64_t j = lo; j <= t; ++j) {
          double dot = 0;
          for (int64_t i = 0; i < 8; ++i) dot += double(qv[t * w + h * 8 + i]) * qv[j * w + (4 + g) * 8 + i];
          double x = dot * sc;
          if (softcap > 0) x = softcap * std::tanh(x / softcap);
          s.push_back(x);
          mx = std::max(mx, x);
        }
        for (auto& x : s) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < 8; ++i) {
          double acc = 0;
          for (int64_t j = lo; j <= t; ++j) acc += s[j - lo] / sum * qv[j * w + (6 + g) * 8 + i];
          ref[t * 32 + h * 8 + i] = acc;
        }
      }
    EXPECT_LT(rel_err(out_p.to_floats(), ref), 1e-6);
    EXPECT_LT(rel_err(out_c.to_floats(), std::vector<double>(ref.begin() + 4 * 32, ref.end())), 1e-6);
  }
}

// Attention sinks (gpt-oss): one logit per q head in each softmax's denominator — softmax over
// [scaled scores | sink], the sink's share dropped — on packed and cache attention, full and
// windowed, against the float64 definition; one head's sink far above its scores.
TEST(CpuBackend, AttentionSinks) {
  auto be = make_cpu_backend();
  const std::vector<float> sink_values = {0.5f, -1.25f, 30.0f, 2.0f};
  Tensor sinks = Tensor::from_floats({4}, sink_values);
  for (int64_t window : {int64_t{0}, int64_t{3}}) {
    SCOPED_TRACE(str("window ", window));
    AttentionDims d{4, 2, 8, 16, 4};
    d.window = window;
    d.sinks = &sinks;
    const int64_t n = 11, w = d.qkv_width();
    auto qv = randn(n * w, 28, 2.0f);
    Tensor qkv = Tensor::from_floats({n, w}, qv);
    std::vector<int64_t> start(n);
    for (int64_t t = 0; t < n; ++t) start[t] = t < 4 ? 0 : 4;
    Tensor out_p = Tensor::zeros({n, d.q_heads * d.head_dim}, DType::f32);
    be->attention_packed(qkv, d, Tensor::from_ints({n}, start), out_p);
    Tensor ck = Tensor::zeros({2, d.kv_heads, d.max_seq, d.head_dim}, DType::f32);
    Tensor cv = Tensor::zeros({2, d.kv_heads, d.max_seq, d.head_dim}, DType::f32);
    std::vector<int64_t> table = {6, 1, 3, 0, 2, 4, 5, 7};
    Tensor run = Tensor::from_floats({7, w}, std::vector<float>(qv.begin() + 4 * w, qv.end()));
    std::vector<int64_t> slots(7), rows(7, 0), pos(7);
    for (int64_t t = 0; t < 7; ++t) pos[t] = t, slots[t] = table[t / 4] * 4 + t % 4;
    be->kv_write(run, d, Tensor::from_ints({7}, slots), ck, cv);
    Tensor out_c = Tensor::zeros({7, d.q_heads * d.head_dim}, DType::f32);
    be->attention_cache(run, d, Tensor::from_ints({7}, rows), Tensor::from_ints({7}, pos),
                        Tensor::from_ints({2, 4}, table), ck, cv, out_c);
    std::vector<double> ref(n * 32);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < 4; ++h) {
        const int64_t g = h / 2, lo = std::max<int64_t>(start[t], window ? t - window + 1 : 0);
        std::vector<double> s;
        double mx = sink_values[h], sum = 0;
        for (int64_t j = lo; j <= t; ++j) {
          double dot = 0;
          for (int64_t i = 0; i < 8; ++i) dot += double(qv[t * w + h * 8 + i]) * qv[j * w + (4 + g) * 8 + i];
          s.push_back(dot / std::sqrt(8.0));
          mx = std::max(mx, s.back());
        }
        for (auto& x : s) sum += (x = std::exp(x - mx));
        sum += std::exp(sink_values[h] - mx);
        for (int64_t i = 0; i < 8; ++i) {
          double acc = 0;
          for (int64_t j = lo; j <= t; ++j) acc += s[j - lo] / sum * qv[j * w + (6 + g) * 8 + i];
          ref[t * 32 + h * 8 + i] = acc;
        }
      }
    EXPECT_LT(rel_err(out_p.to_floats(), ref), 1e-6);
    EXPECT_LT(rel_err(out_c.to_floats(), std::vector<double>(ref.begin() + 4 * 32, ref.end())), 1e-6);
    // The packed and the cache path give the same bits (a token's numbers whichever path).
    const auto p = out_p.to_floats(), c = out_c.to_floats();
    EXPECT_TRUE(std::equal(c.begin(), c.end(), p.begin() + 4 * 32));
    // Head 2's sink (30) takes nearly all: its outputs are ~e^-25 of the values.
    for (int64_t t = 0; t < n; ++t) EXPECT_LT(std::abs(p[t * 32 + 2 * 8]), 1e-6);
  }
  // A sink tensor of the wrong size is refused naming it.
  Tensor three = Tensor::from_floats({3}, {0.f, 0.f, 0.f});
  AttentionDims d{4, 2, 8, 16, 4};
  d.sinks = &three;
  Tensor qkv = Tensor::zeros({1, d.qkv_width()}, DType::f32), out = Tensor::zeros({1, 32}, DType::f32);
  try {
    be->attention_packed(qkv, d, Tensor::from_ints({1}, {0}), out);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_packed: sinks Tensor[3; f32] should be f32 [4] (one per q head)"), std::string::npos)
        << e.what();
  }
}

// Partial rotation (the first R of D dims), per-token frequencies and the attention factor.
TEST(CpuBackend, RopePartialPerTokenScaled) {
  auto be = make_cpu_backend();
  const int64_t n = 3, d = 8, r = 6, half = 3, heads = 2;
  auto xv = randn(n * heads * d, 21);
  Tensor x = Tensor::from_floats({n, heads * d}, xv);
  std::vector<float> f = {1.0f, 0.3f, 0.01f, 0.5f, 0.2f, 0.02f, 0.9f, 0.1f, 0.001f};  // [N, R/2]
  std::vector<int64_t> pos = {0, 7, 31};
  be->rope_heads(x, 0, heads, d, Tensor::from_ints({n}, pos), Tensor::from_floats({n, half}, f), 1.25f);
  const auto y = x.to_floats();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const float* v = &xv[(t * heads + h) * d];
      for (int64_t i = 0; i < half; ++i) {
        const double ang = double(float(pos[t]) * f[t * half + i]);
        const double c = 1.25 * std::cos(ang), s = 1.25 * std::sin(ang);
        EXPECT_NEAR(y[(t * heads + h) * d + i], v[i] * c - v[i + half] * s, 1e-5);
        EXPECT_NEAR(y[(t * heads + h) * d + i + half], v[i + half] * c + v[i] * s, 1e-5);
      }
      for (int64_t i = r; i < d; ++i) EXPECT_EQ(y[(t * heads + h) * d + i], v[i]);  // passed through
    }
}

// gpt-oss's clamped SwiGLU: gate = even columns ≤ limit, up = odd columns in ±limit,
// (up + 1) · gate · sigmoid(alpha · gate), against float64; values past ±limit on both sides.
TEST(CpuBackend, SwigluClamped) {
  auto be = make_cpu_backend();
  const int64_t n = 3, inner = 7;
  auto gv = randn(n * 2 * inner, 23, 6.0f);
  gv[0] = 9.5f, gv[1] = -8.0f, gv[2] = -11.0f, gv[3] = 7.5f;
  Tensor gu = Tensor::from_floats({n, 2 * inner}, gv), out = Tensor::empty({n, inner}, DType::f32);
  be->swiglu_clamped(gu, out, 1.702f, 7.0f);
  const auto o = out.to_floats();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < inner; ++i) {
      const double g = std::min<double>(gv[r * 2 * inner + 2 * i], 7.0);
      const double u = std::clamp<double>(gv[r * 2 * inner + 2 * i + 1], -7.0, 7.0);
      const double want = (u + 1) * g / (1 + std::exp(-1.702 * g));
      EXPECT_NEAR(o[r * inner + i], want, 1e-5 * std::max(1.0, std::abs(want)));
    }
  EXPECT_NEAR(o[0], (-7.0 + 1) * 7.0 / (1 + std::exp(-1.702 * 7.0)), 1e-5);  // both clamped
}

TEST(CpuBackend, GegluPointwiseAndColumnNorms) {
  auto be = make_cpu_backend();
  const int64_t n = 2, inner = 5;
  auto gv = randn(n * 2 * inner, 22, 2.0f);
  Tensor gu = Tensor::from_floats({n, 2 * inner}, gv), out = Tensor::empty({n, inner}, DType::f32);
  be->geglu(gu, out);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < inner; ++i) {
      const double a = gv[r * 2 * inner + i], b = gv[r * 2 * inner + inner + i];
      const double gelu = 0.5 * a * (1 + std::tanh(std::sqrt(2 / M_PI) * (a + 0.044715 * a * a * a)));
      EXPECT_NEAR(out.to_floats()[r * inner + i], gelu * b, 1e-5);
    }
  Tensor p = Tensor::from_floats({3}, {-6.0f, 0.5f, 9.0f});
  be->pointwise(p, Backend::Pointwise::softcap, 3.0f);
  EXPECT_NEAR(p.to_floats()[0], 3 * std::tanh(-2.0), 1e-6);
  EXPECT_NEAR(p.to_floats()[2], 3 * std::tanh(3.0), 1e-6);
  be->pointwise(p, Backend::Pointwise::divide, 2.0f);
  be->pointwise(p, Backend::Pointwise::multiply, 4.0f);
  EXPECT_NEAR(p.to_floats()[1], 2 * 3 * std::tanh(0.5 / 3), 1e-6);
  // Per-head norms, and a norm over columns whose sum of squares is given (as all-reduced).
  const int64_t w = 12;
  auto xv = randn(n * w, 23);
  auto wv = randn(4, 24);
  Tensor x = Tensor::from_floats({n, w}, xv), wt = Tensor::from_floats({4}, wv);
  be->rms_norm_cols(x, 4, 2, 4, wt, 1e-6f, nullptr, 0);  // columns 4…11 as two heads of 4
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(x.to_floats()[r * w + c], xv[r * w + c]);
    for (int64_t g = 0; g < 2; ++g) {
      double ss = 0;
      for (int64_t i = 0; i < 4; ++i) ss += double(xv[r * w + 4 + g * 4 + i]) * xv[r * w + 4 + g * 4 + i];
      for (int64_t i = 0; i < 4; ++i)
        EXPECT_NEAR(x.to_floats()[r * w + 4 + g * 4 + i], xv[r * w + 4 + g * 4 + i] / std::sqrt(ss / 4 + 1e-6) * wv[i], 1e-5);
    }
  }
  Tensor y = Tensor::from_floats({n, w}, xv), ss = Tensor::empty({n}, DType::f32);
  be->sum_squares(y, 0, 4, ss);
  std::vector<float> total = ss.to_floats();
  for (auto& v : total) v *= 3;  // as if two more shards held as much
  Tensor tot = Tensor::from_floats({n}, total);
  be->rms_norm_cols(y, 0, 1, 4, wt, 1e-6f, &tot, 12);
  for (int64_t r = 0; r < n; ++r) {
    double s = 0;
    for (int64_t i = 0; i < 4; ++i) s += double(xv[r * w + i]) * xv[r * w + i];
    EXPECT_NEAR(ss.to_floats()[r], s, 1e-4);
    for (int64_t i = 0; i < 4; ++i)
      EXPECT_NEAR(y.to_floats()[r * w + i], xv[r * w + i] / std::sqrt(3 * s / 12 + 1e-6) * wv[i], 1e-5);
  }
}
