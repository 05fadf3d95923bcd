// A plain float64 Llama forward (no cache, no sharding), written from the definition in
// Hugging Face's LlamaForCausalLM: the reference the model's entries are checked against.
#pragma once
#include <cmath>
#include <map>
#include <vector>

#include "layers/parameters.h"
#include "layers/rope.h"
#include "layers/weight_source.h"

namespace linnet::testing {

class ReferenceLlama {
 public:
  ReferenceLlama(const ModelConfig& c, WeightSource& w) : c_(c) {
    Generics g = bind_generics(c, RunOptions{1, 0, 1, 1, DType::f32});
    for (const auto& p : parameter_specs(c, g)) {
      auto v = w.read(p, 0).to_floats();
      params_[p.card_name] = std::vector<double>(v.begin(), v.end());
    }
    auto f = rope_inv_freq(c);
    inv_freq_.assign(f.begin(), f.end());
  }

  // Logits [S, Vocab] (or hidden states [S, H] after the final norm) of one sequence.
  std::vector<double> run(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions,
                          bool hidden_only = false) const {
    const int64_t s = static_cast<int64_t>(tokens.size()), h = c_.hidden, d = c_.head_dim();
    std::vector<double> x(s * h);
    for (int64_t t = 0; t < s; ++t)
      for (int64_t i = 0; i < h; ++i) x[t * h + i] = p("embedding.weight")[tokens[t] * h + i];
    for (int64_t l = 0; l < c_.layers; ++l) {
      const std::string L = "layers[" + std::to_string(l) + "].";
      auto hn = norm(x, s, p(L + "attention_norm.weight"));
      auto q = linear(hn, s, L + "attention.q_proj"), k = linear(hn, s, L + "attention.k_proj"),
           v = linear(hn, s, L + "attention.v_proj");
      rope(q, s, c_.heads, positions);
      rope(k, s, c_.kv_heads, positions);
      std::vector<double> a(s * c_.heads * d, 0.0);
      const int64_t group = c_.heads / c_.kv_heads;
      for (int64_t t = 0; t < s; ++t)
        for (int64_t hd = 0; hd < c_.heads; ++hd) {
          const int64_t g = hd / group;
          std::vector<double> sc(t + 1);
          double mx = -1e300, sum = 0;
          for (int64_t j = 0; j <= t; ++j) {
            double dot = 0;
            for (int64_t i = 0; i < d; ++i) dot += q[(t * c_.heads + hd) * d + i] * k[(j * c_.kv_heads + g) * d + i];
            sc[j] = dot / std::sqrt(double(d));
            mx = std::max(mx, sc[j]);
          }
          for (auto& e : sc) sum += (e = std::exp(e - mx));
          for (int64_t j = 0; j <= t; ++j)
            for (int64_t i = 0; i < d; ++i) a[(t * c_.heads + hd) * d + i] += sc[j] / sum * v[(j * c_.kv_heads + g) * d + i];
        }
      auto o = linear(a, s, L + "attention.o_proj");
      for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
      auto hm = norm(x, s, p(L + "mlp_norm.weight"));
      auto gt = linear(hm, s, L + "mlp.gate"), up = linear(hm, s, L + "mlp.up");
      for (size_t i = 0; i < gt.size(); ++i) gt[i] = gt[i] / (1 + std::exp(-gt[i])) * up[i];
      auto dn = linear(gt, s, L + "mlp.down");
      for (size_t i = 0; i < x.size(); ++i) x[i] += dn[i];
    }
    auto hf = norm(x, s, p("norm.weight"));
    if (hidden_only) return hf;
    return linear(hf, s, "lm_head");
  }

 private:
  const std::vector<double>& p(const std::string& n) const { return params_.at(n); }
  std::vector<double> norm(const std::vector<double>& x, int64_t s, const std::vector<double>& w) const {
    const int64_t h = c_.hidden;
    std::vector<double> y(x.size());
    for (int64_t t = 0; t < s; ++t) {
      double ss = 0;
      for (int64_t i = 0; i < h; ++i) ss += x[t * h + i] * x[t * h + i];
      const double inv = 1 / std::sqrt(ss / h + c_.rms_norm_eps);
      for (int64_t i = 0; i < h; ++i) y[t * h + i] = x[t * h + i] * inv * w[i];
    }
    return y;
  }
  std::vector<double> linear(const std::vector<double>& x, int64_t s, const std::string& name) const {
    const auto& w = p(name + ".weight");
    auto b = params_.find(name + ".bias");
    const int64_t in = static_cast<int64_t>(x.size()) / s, out = static_cast<int64_t>(w.size()) / in;
    std::vector<double> y(s * out);
    for (int64_t t = 0; t < s; ++t)
      for (int64_t o = 0; o < out; ++o) {
        double acc = b != params_.end() ? b->second[o] : 0.0;
        for (int64_t i = 0; i < in; ++i) acc += x[t * in + i] * w[o * in + i];
        y[t * out + o] = acc;
      }
    return y;
  }
  void rope(std::vector<double>& x, int64_t s, int64_t heads, const std::vector<int64_t>& pos) const {
    const int64_t d = c_.head_dim(), half = d / 2;
    for (int64_t t = 0; t < s; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const double ang = double(float(pos[t]) * float(inv_freq_[i]));
          double& a = x[(t * heads + h) * d + i];
          double& b = x[(t * heads + h) * d + i + half];
          const double na = a * std::cos(ang) - b * std::sin(ang), nb = b * std::cos(ang) + a * std::sin(ang);
          a = na;
          b = nb;
        }
  }

  ModelConfig c_;
  std::map<std::string, std::vector<double>> params_;
  std::vector<double> inv_freq_;
};

}  // namespace linnet::testing
