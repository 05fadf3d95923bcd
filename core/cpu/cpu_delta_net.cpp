// The Gated DeltaNet ops on the CPU (core/backend_op_list.h): the causal convolution, the gated
// delta rule and the gated RMSNorm, in f32. Each walks a row's tokens in order (the recurrent
// form): a token's result depends on its row's state and earlier tokens only.
#include <cmath>
#include <vector>

#include "core/cpu/cpu_backend.h"

namespace linnet {

namespace {
float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus (beta 1, threshold 20).
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
}  // namespace

void CpuBackend::causal_conv1d_op(const Tensor& x, const Tensor& weight, const Tensor& rows, Tensor& state,
                                  Tensor& out) {
  cpu_expect_f32(x, "causal_conv1d", "x");
  cpu_expect_f32(weight, "causal_conv1d", "weight");
  cpu_expect_f32(out, "causal_conv1d", "out");
  const int64_t n = x.dim(0), channels = x.dim(1), kernel = weight.dim(1), kept = kernel - 1;
  const int32_t* row = rows.ptr<int32_t>();
  for (int64_t t = 0; t < n; ++t)
    LINNET_CHECK(row[t] >= 0 && row[t] < state.dim(0), "causal_conv1d: rows[", t, "] = ", row[t], " outside the state's ",
                 state.dim(0), " rows");
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
    }
  }
}

void CpuBackend::gated_delta_rule_op(const Tensor& qkv, const Tensor& ab, const Tensor& a_log, const Tensor& dt_bias,
                                     const Tensor& rows, const DeltaNetDims& d, Tensor& state, Tensor& out) {
  for (auto [t, name] : {std::pair{&qkv, "qkv"}, {&ab, "ab"}, {&a_log, "a_log"}, {&dt_bias, "dt_bias"}, {&out, "out"}})
    cpu_expect_f32(*t, "gated_delta_rule", name);
  const int64_t n = qkv.dim(0), width = d.qkv_width(), hk = d.key_heads, hv = d.value_heads, dk = d.key_dim,
                dv = d.value_dim, group = hv / hk;
  const int32_t* row = rows.ptr<int32_t>();
  for (int64_t t = 0; t < n; ++t)
    LINNET_CHECK(row[t] >= 0 && row[t] < state.dim(0), "gated_delta_rule: rows[", t, "] = ", row[t],
                 " outside the state's ", state.dim(0), " rows");
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
      for (int64_t e = 0; e < dk * dv; ++e) s[e] *= decay;
      for (int64_t c = 0; c < dv; ++c) delta[static_cast<size_t>(c)] = 0.0f;
      for (int64_t r = 0; r < dk; ++r)
        for (int64_t c = 0; c < dv; ++c) delta[static_cast<size_t>(c)] += s[r * dv + c] * kt[r];
      for (int64_t c = 0; c < dv; ++c) delta[static_cast<size_t>(c)] = (vt[c] - delta[static_cast<size_t>(c)]) * beta;
      for (int64_t r = 0; r < dk; ++r)
        for (int64_t c = 0; c < dv; ++c) s[r * dv + c] += kt[r] * delta[static_cast<size_t>(c)];
      float* ot = o + t * hv * dv + h * dv;
      for (int64_t c = 0; c < dv; ++c) ot[c] = 0.0f;
      for (int64_t r = 0; r < dk; ++r)
        for (int64_t c = 0; c < dv; ++c) ot[c] += s[r * dv + c] * qt[r];
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
