// The Gated DeltaNet ops on the CPU (core/backend_op_list.h): the causal convolution, the gated
// delta rule and the gated RMSNorm, in f32. Each walks a row's tokens in order (the recurrent
// form): a token's result depends on its row's state and earlier tokens only.
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

void CpuBackend::gated_delta_rule_op(const Tensor& qkv, const Tensor& ab, const Tensor& a_log, const Tensor& dt_bias,
                                     const Tensor& rows, const Tensor& keep, const DeltaNetDims& d, Tensor& state,
                                     Tensor& out) {
  for (auto [t, name] : {std::pair{&qkv, "qkv"}, {&ab, "ab"}, {&a_log, "a_log"}, {&dt_bias, "dt_bias"}, {&out, "out"}})
    cpu_expect_f32(*t, "gated_delta_rule", name);
  const int64_t n = qkv.dim(0), width = d.qkv_width(), hk = d.key_heads, hv = d.value_heads, dk = d.key_dim,
                dv = d.value_dim, group = hv / hk;
  const int32_t* row = rows.ptr<int32_t>();
  const int32_t* keep_row = checked_rows("gated_delta_rule", rows, keep, state);
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
  // Value heads are independent: each walks every token in order over its rows' states.
#pragma omp parallel for schedule(static) if (n * hv * dk * dv > 65536)
  for (int64_t h = 0; h < hv; ++h) {
    const int64_t j = h / group;
    std::vector<float> delta(static_cast<size_t>(dv));
    const float a_h = -std::exp(alog[h]);
    for (int64_t t = 0; t < n; ++t) {
      float* s = st + (static_cast<int64_t>(row[t]) * hv + h) * dk * dv;  // [dk, dv]
      const float* kt = k.data() + (t * hk + j) * dk;
      const float* qt = q.data() + (t * hk + j) * dk;
      const float* vt = in + t * width + 2 * hk * dk + h * dv;
      const float beta = 1.0f / (1.0f + std::exp(-abs[t * 2 * hv + h]));
      const float decay = std::exp(a_h * softplus(abs[t * 2 * hv + hv + h] + dtb[h]));
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
      if (keep_row && keep_row[t] >= 0) std::copy(s, s + dk * dv, st + (static_cast<int64_t>(keep_row[t]) * hv + h) * dk * dv);
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
