// The Gated DeltaNet ops on the CPU (core/backend_op_list.h): the causal convolution, the gated
// delta rule and the gated RMSNorm, in f32. Each walks a row's tokens in order (the recurrent
// form), the delta rule an aligned chunk at once (the chunked form): a token's result depends on
// its row's state and earlier tokens, and whether its aligned chunk was whole in the call.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu/cpu_backend.h"

namespace linnet {

namespace {
float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus (beta 1, threshold 20).
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// rows[t] and keep[t] (when kept) within the state's rows, and no kept row also a token's row:
// a snapshot is written while the call's tokens run, so it may not be one of their states.
const int32_t* checked_rows(const char* op, const Tensor& rows, const Tensor& keep, const Tensor& state) {
  const int64_t n = rows.numel(), states = state.dim(0);
  const int32_t* row = rows.ptr<int32_t>();
  std::vector<char> used(static_cast<size_t>(states), 0);
  for (int64_t t = 0; t < n; ++t) {
    LINNET_CHECK(row[t] >= 0 && row[t] < states, op, ": rows[", t, "] = ", row[t], " outside the state's ", states,
                 " rows");
    used[static_cast<size_t>(row[t])] = 1;
  }
  if (!keep.defined()) return nullptr;
  const int32_t* kept = keep.ptr<int32_t>();
  for (int64_t t = 0; t < n; ++t)
    LINNET_CHECK(kept[t] >= -1 && kept[t] < states && (kept[t] < 0 || !used[static_cast<size_t>(kept[t])]), op,
                 ": keep[", t, "] = ", kept[t], " is not −1 or a row of the state's ", states,
                 " that no token of the call runs on");
  return kept;
}
}  // namespace

void CpuBackend::causal_conv1d_op(const Tensor& x, const Tensor& weight, const Tensor& rows, const Tensor& keep,
                                  Tensor& state, Tensor& out) {
  cpu_expect_f32(x, "causal_conv1d", "x");
  cpu_expect_f32(weight, "causal_conv1d", "weight");
  cpu_expect_f32(out, "causal_conv1d", "out");
  const int64_t n = x.dim(0), channels = x.dim(1), kernel = weight.dim(1), kept = kernel - 1;
  const int32_t* row = rows.ptr<int32_t>();
  const int32_t* keep_row = checked_rows("causal_conv1d", rows, keep, state);
  const float* xs = x.ptr<float>();
  const float* w = weight.ptr<float>();
  float* st = state.ptr<float>();
  float* o = out.ptr<float>();
  // Channels are independent: each walks every token in order.
#pragma omp parallel for schedule(static) if (n * channels > 4096)
  for (int64_t c = 0; c < channels; ++c) {
    const float* wc = w + c * kernel;
    for (int64_t t = 0; t < n; ++t) {
      float* s = st + (static_cast<int64_t>(row[t]) * channels + c) * kept;  // oldest first
      const float now = xs[t * channels + c];
      float acc = 0.0f;
      for (int64_t k = 0; k < kept; ++k) acc += wc[k] * s[k];
      acc += wc[kept] * now;
      o[t * channels + c] = silu(acc);
      for (int64_t k = 0; k + 1 < kept; ++k) s[k] = s[k + 1];
      if (kept > 0) s[kept - 1] = now;
      if (keep_row && keep_row[t] >= 0)
        std::copy(s, s + kept, st + (static_cast<int64_t>(keep_row[t]) * channels + c) * kept);
    }
  }
}

namespace {

// A call's aligned chunks (gated_delta_rule's positions): the kDeltaRuleChunk tokens of a row at
// positions [64c, 64c + 64), all in the call, in call order. first[t]: the chunk token t begins,
// or −1; member[t]: whether t is in one (the walk skips a chunk's later tokens: the chunk ran
// them when it reached the first).
struct AlignedChunks {
  std::vector<int64_t> tokens;  // kDeltaRuleChunk a chunk
  std::vector<int32_t> first;
  std::vector<char> member;
};

AlignedChunks aligned_chunks(const int32_t* row, const Tensor& positions, int64_t n, int64_t states) {
  constexpr int64_t C = kDeltaRuleChunk;
  AlignedChunks a{{}, std::vector<int32_t>(static_cast<size_t>(n), -1), std::vector<char>(static_cast<size_t>(n), 0)};
  if (!positions.defined()) return a;
  const int32_t* pos = positions.ptr<int32_t>();
  std::vector<std::vector<int64_t>> by_row(static_cast<size_t>(states));
  for (int64_t t = 0; t < n; ++t) by_row[static_cast<size_t>(row[t])].push_back(t);
  for (const std::vector<int64_t>& mine : by_row) {
    const int64_t m = static_cast<int64_t>(mine.size());
    for (int64_t i = 0; i + C <= m;) {
      const int64_t p = pos[mine[static_cast<size_t>(i)]];
      bool whole = p % C == 0;
      for (int64_t u = 1; whole && u < C; ++u) whole = pos[mine[static_cast<size_t>(i + u)]] == p + u;
      if (!whole) {
        ++i;
        continue;
      }
      a.first[static_cast<size_t>(mine[static_cast<size_t>(i)])] = static_cast<int32_t>(a.tokens.size() / C);
      for (int64_t u = 0; u < C; ++u) {
        a.tokens.push_back(mine[static_cast<size_t>(i + u)]);
        a.member[static_cast<size_t>(mine[static_cast<size_t>(i + u)])] = 1;
      }
      i += C;
    }
  }
  return a;
}

// One token's g and β for value head h (β = sigmoid(b), g = −e^{A_log} · softplus(a + dt_bias)).
struct Gates {
  float beta, g;
};
Gates gates_of(const float* ab, int64_t t, int64_t h, int64_t hv, float a_h, float bias) {
  return {1.0f / (1.0f + std::exp(-ab[t * 2 * hv + h])), a_h * softplus(ab[t * 2 * hv + hv + h] + bias)};
}

// The f32 buffers of one head's chunk (C = kDeltaRuleChunk).
struct ChunkScratch {
  std::vector<float> G, eG, to_last, beta, A, row, U, W, O;  // eG = e^{G_i}, to_last = e^{G_last − G_i}
  ChunkScratch(int64_t dk, int64_t dv) {
    constexpr int64_t C = kDeltaRuleChunk;
    G.resize(C), eG.resize(C), to_last.resize(C), beta.resize(C), A.resize(C * C), row.resize(C);
    U.resize(static_cast<size_t>(C * dv)), W.resize(static_cast<size_t>(C * dk)), O.resize(static_cast<size_t>(C * dv));
  }
};

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void CpuBackend::gated_delta_rule_op(const Tensor& qkv, const Tensor& ab, const Tensor& a_log, const Tensor& dt_bias,
                                     const Tensor& rows, const Tensor& positions, const Tensor& keep,
                                     const DeltaNetDims& d, Tensor& state, Tensor& out) {
  for (auto [t, name] : {std::pair{&qkv, "qkv"}, {&ab, "ab"}, {&a_log, "a_log"}, {&dt_bias, "dt_bias"}, {&out, "out"}})
    cpu_expect_f32(*t, "gated_delta_rule", name);
  constexpr int64_t C = kDeltaRuleChunk;
  const int64_t n = qkv.dim(0), width = d.qkv_width(), hk = d.key_heads, hv = d.value_heads, dk = d.key_dim,
                dv = d.value_dim, group = hv / hk;
  const int32_t* row = rows.ptr<int32_t>();
  const int32_t* keep_row = checked_rows("gated_delta_rule", rows, keep, state);
  const AlignedChunks chunks = aligned_chunks(row, positions, n, state.dim(0));
  // Queries and keys L2-normalized (the query also by 1/√key_dim), per token and key head.
  std::vector<float> q(static_cast<size_t>(n * hk * dk)), k(q.size());
  const float* in = qkv.ptr<float>();
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
#pragma omp parallel for schedule(static) if (n * hk * dk > 4096)
  for (int64_t i = 0; i < n * hk; ++i) {
    const int64_t t = i / hk, j = i % hk;
    for (int64_t which = 0; which < 2; ++which) {
      const float* src = in + t * width + which * hk * dk + j * dk;
      float ss = 0.0f;
      for (int64_t e = 0; e < dk; ++e) ss += src[e] * src[e];
      const float inv = 1.0f / std::sqrt(ss + 1e-6f);
      float* dst = (which == 0 ? q.data() : k.data()) + i * dk;
      for (int64_t e = 0; e < dk; ++e) dst[e] = which == 0 ? src[e] * inv * q_scale : src[e] * inv;
    }
  }
  const float* abs = ab.ptr<float>();
  const float* alog = a_log.ptr<float>();
  const float* dtb = dt_bias.ptr<float>();
  float* st = state.ptr<float>();
  float* o = out.ptr<float>();
  auto state_of = [&](int64_t r, int64_t h) { return st + (r * hv + h) * dk * dv; };  // [dk, dv]
  // Value heads are independent: each walks every token in order over its rows' states.
#pragma omp parallel for schedule(static) if (n * hv * dk * dv > 65536)
  for (int64_t h = 0; h < hv; ++h) {
    const int64_t j = h / group;
    std::vector<float> delta(static_cast<size_t>(dv));
    ChunkScratch w(chunks.tokens.empty() ? 0 : dk, chunks.tokens.empty() ? 0 : dv);
    const float a_h = -std::exp(alog[h]);
    auto qk = [&](const std::vector<float>& v, int64_t t) { return v.data() + (t * hk + j) * dk; };
    for (int64_t t = 0; t < n; ++t) {
      float* s = state_of(row[t], h);
      if (chunks.first[static_cast<size_t>(t)] >= 0) {
        // The chunked form over an aligned chunk (transformers' torch_chunk_gated_delta_rule):
        // δ = T(β ⊙ v) − T(β e^G ⊙ k) S₀ with T = (I − A)⁻¹, A[i][m] = −β_i k_i·k_m e^{G_i − G_m}
        // (m < i), found row by row as transformers does; out_i = e^{G_i} q_i S₀ + Σ_{m≤i}
        // q_i·k_m e^{G_i − G_m} δ_m; S ← e^{G_last} S₀ + Σ_m e^{G_last − G_m} k_m ⊗ δ_m.
        const int64_t* idx = chunks.tokens.data() + chunks.first[static_cast<size_t>(t)] * C;
        float cum = 0.0f;
        for (int64_t i = 0; i < C; ++i) {
          const Gates gt = gates_of(abs, idx[i], h, hv, a_h, dtb[h]);
          w.beta[i] = gt.beta;
          w.G[i] = cum += gt.g;
          w.eG[i] = std::exp(w.G[i]);
        }
        for (int64_t i = 0; i < C; ++i) w.to_last[i] = std::exp(w.G[C - 1] - w.G[i]);
        float* A = w.A.data();
        for (int64_t i = 0; i < C; ++i)
          for (int64_t m = 0; m < i; ++m)
            A[i * C + m] = -(w.beta[i] * dot(qk(k, idx[i]), qk(k, idx[m]), dk)) * std::exp(w.G[i] - w.G[m]);
        for (int64_t i = 1; i < C; ++i) {  // row i from the rows above it, as they stand once found
          for (int64_t m = 0; m < i; ++m) {
            float acc = A[i * C + m];
            for (int64_t u = m + 1; u < i; ++u) acc += A[i * C + u] * A[u * C + m];
            w.row[m] = acc;
          }
          std::copy(w.row.begin(), w.row.begin() + i, A + i * C);
        }
        float* U = w.U.data();
        float* W = w.W.data();
        for (int64_t i = 0; i < C; ++i) {  // U = T (β v), W = T (β e^G k); T's diagonal is 1
          float* ui = U + i * dv;
          float* wi = W + i * dk;
          for (int64_t c = 0; c < dv; ++c) ui[c] = 0.0f;
          for (int64_t r = 0; r < dk; ++r) wi[r] = 0.0f;
          for (int64_t m = 0; m <= i; ++m) {
            const float tm = (m == i ? 1.0f : A[i * C + m]) * w.beta[m], em = tm * w.eG[m];
            const float* vm = in + idx[m] * width + 2 * hk * dk + h * dv;
            const float* km = qk(k, idx[m]);
            for (int64_t c = 0; c < dv; ++c) ui[c] += tm * vm[c];
            for (int64_t r = 0; r < dk; ++r) wi[r] += em * km[r];
          }
        }
        // δ = U − W S₀ (in U), and the outputs' inter-chunk part e^{G_i} q_i S₀, reading S₀ once by rows.
        float* O = w.O.data();
        std::fill(w.O.begin(), w.O.end(), 0.0f);
        for (int64_t r = 0; r < dk; ++r) {
          const float* sr = s + r * dv;
          for (int64_t i = 0; i < C; ++i) {
            const float wr = W[i * dk + r], qr = qk(q, idx[i])[r] * w.eG[i];
            float* ui = U + i * dv;
            float* oi = O + i * dv;
            for (int64_t c = 0; c < dv; ++c) {
              ui[c] -= wr * sr[c];
              oi[c] += qr * sr[c];
            }
          }
        }
        for (int64_t i = 0; i < C; ++i) {  // + Σ_{m≤i} q_i·k_m e^{G_i − G_m} δ_m
          float* oi = O + i * dv;
          for (int64_t m = 0; m <= i; ++m) {
            const float p = dot(qk(q, idx[i]), qk(k, idx[m]), dk) * std::exp(w.G[i] - w.G[m]);
            const float* um = U + m * dv;
            for (int64_t c = 0; c < dv; ++c) oi[c] += p * um[c];
          }
          std::copy(oi, oi + dv, o + idx[i] * hv * dv + h * dv);
        }
        // A snapshot inside the chunk: the state after its token, before S₀ is advanced.
        for (int64_t i = 0; keep_row && i + 1 < C; ++i) {
          if (keep_row[idx[i]] < 0) continue;
          float* snap = state_of(keep_row[idx[i]], h);
          for (int64_t r = 0; r < dk; ++r) {
            float* pr = snap + r * dv;
            const float* sr = s + r * dv;
            for (int64_t c = 0; c < dv; ++c) pr[c] = sr[c] * w.eG[i];
            for (int64_t m = 0; m <= i; ++m) {
              const float coef = qk(k, idx[m])[r] * std::exp(w.G[i] - w.G[m]);
              const float* um = U + m * dv;
              for (int64_t c = 0; c < dv; ++c) pr[c] += coef * um[c];
            }
          }
        }
        for (int64_t r = 0; r < dk; ++r) {
          float* sr = s + r * dv;
          for (int64_t c = 0; c < dv; ++c) sr[c] *= w.eG[C - 1];
          for (int64_t m = 0; m < C; ++m) {
            const float coef = qk(k, idx[m])[r] * w.to_last[m];
            const float* um = U + m * dv;
            for (int64_t c = 0; c < dv; ++c) sr[c] += coef * um[c];
          }
        }
        if (keep_row && keep_row[idx[C - 1]] >= 0) std::copy(s, s + dk * dv, state_of(keep_row[idx[C - 1]], h));
        continue;
      }
      if (chunks.member[static_cast<size_t>(t)]) continue;  // its chunk ran it
      const float* kt = qk(k, t);
      const float* qt = qk(q, t);
      const float* vt = in + t * width + 2 * hk * dk + h * dv;
      const Gates gt = gates_of(abs, t, h, hv, a_h, dtb[h]);
      const float beta = gt.beta, decay = std::exp(gt.g);
      // Two passes over the [dk, dv] state (it is the memory traffic): decay it while summing
      // Sᵀk, then add k ⊗ delta while summing Sᵀq — each value's operations in the order of the
      // four-step form (decay, Sᵀk by r, update, Sᵀq by r), so the same bits.
      float* dl = delta.data();
      for (int64_t c = 0; c < dv; ++c) dl[c] = 0.0f;
      for (int64_t r = 0; r < dk; ++r) {
        float* sr = s + r * dv;
        const float kr = kt[r];
        for (int64_t c = 0; c < dv; ++c) {
          sr[c] *= decay;
          dl[c] += sr[c] * kr;
        }
      }
      for (int64_t c = 0; c < dv; ++c) dl[c] = (vt[c] - dl[c]) * beta;
      float* ot = o + t * hv * dv + h * dv;
      for (int64_t c = 0; c < dv; ++c) ot[c] = 0.0f;
      for (int64_t r = 0; r < dk; ++r) {
        float* sr = s + r * dv;
        const float kr = kt[r], qr = qt[r];
        for (int64_t c = 0; c < dv; ++c) {
          sr[c] += kr * dl[c];
          ot[c] += sr[c] * qr;
        }
      }
      if (keep_row && keep_row[t] >= 0) std::copy(s, s + dk * dv, state_of(keep_row[t], h));
    }
  }
}

void CpuBackend::rms_norm_gated_op(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& out) {
  for (auto [t, name] : {std::pair{&x, "x"}, {&z, "z"}, {&w, "w"}, {&out, "out"}})
    cpu_expect_f32(*t, "rms_norm_gated", name);
  const int64_t width = w.numel(), groups = x.numel() / width;
  const float* xs = x.ptr<float>();
  const float* zs = z.ptr<float>();
  const float* ws = w.ptr<float>();
  float* o = out.ptr<float>();
#pragma omp parallel for schedule(static) if (groups * width > 16384)
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = xs + g * width;
    float ss = 0.0f;
    for (int64_t i = 0; i < width; ++i) ss += xg[i] * xg[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(width) + eps);
    for (int64_t i = 0; i < width; ++i) o[g * width + i] = ws[i] * (xg[i] * inv) * silu(zs[g * width + i]);
  }
}

}  // namespace linnet
