#include "layers/rope.h"

#include <algorithm>
#include <cmath>

namespace linnet {

namespace {

// transformers: 1 / base ** (arange(0, dim, 2).float() / dim), the power taken in f32.
std::vector<float> default_freq(double base, int64_t dim) {
  std::vector<float> f(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    f[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(base), exponent);
  }
  return f;
}

double get_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

RopeFrequencies yarn(const ModelConfig& c, const Rope& r) {
  const RopeScaling& s = r.scaling;
  const int64_t dim = c.rotary_dim();
  const double base = r.theta, factor = s.factor;
  RopeFrequencies out;
  if (s.attention_factor) {
    out.scale = static_cast<float>(*s.attention_factor);
  } else if (s.mscale && s.mscale_all_dim && *s.mscale != 0 && *s.mscale_all_dim != 0) {
    out.scale = static_cast<float>(get_mscale(factor, *s.mscale) / get_mscale(factor, *s.mscale_all_dim));
  } else {
    out.scale = static_cast<float>(get_mscale(factor, 1.0));
  }
  // The dims whose wavelengths make beta_fast and beta_slow rotations over the original length.
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(static_cast<double>(s.original_max_position) / (rotations * 2 * M_PI))) /
           (2 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  out.inv_freq.resize(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float pos_freq = std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(dim));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (static_cast<float>(factor) * pos_freq);
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    out.inv_freq[static_cast<size_t>(i)] =
        interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return out;
}

RopeFrequencies longrope(const ModelConfig& c, const Rope& r, int64_t seq_len) {
  const RopeScaling& s = r.scaling;
  const int64_t dim = c.rotary_dim();
  RopeFrequencies out;
  if (s.attention_factor) {
    out.scale = static_cast<float>(*s.attention_factor);
  } else {
    out.scale = s.factor <= 1.0 ? 1.0f
                                : static_cast<float>(std::sqrt(1 + std::log(s.factor) /
                                                                       std::log(static_cast<double>(s.original_max_position))));
  }
  const std::vector<double>& ext = seq_len > s.original_max_position ? s.long_factor : s.short_factor;
  out.inv_freq.resize(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float shape = static_cast<float>(2 * i) / static_cast<float>(dim);
    out.inv_freq[static_cast<size_t>(i)] =
        1.0f / (static_cast<float>(ext[static_cast<size_t>(i)]) * std::pow(static_cast<float>(r.theta), shape));
  }
  return out;
}

RopeFrequencies dynamic(const ModelConfig& c, const Rope& r, int64_t seq_len) {
  const RopeScaling& s = r.scaling;
  const int64_t dim = c.rotary_dim();
  const double exponent = static_cast<double>(dim) / static_cast<double>(dim - 2);
  RopeFrequencies out;
  if (seq_len <= c.max_position) {
    // As at load: seq_len = max_position_embeddings, in Python floats (a base × 1).
    const double mp = static_cast<double>(c.max_position);
    const double base = r.theta * std::pow((s.factor * mp / mp) - (s.factor - 1), exponent);
    out.inv_freq = default_freq(base, dim);
    return out;
  }
  // Grown past max_position_embeddings: transformers forms the base from a tensor seq_len, in f32.
  float t = static_cast<float>(s.factor) * static_cast<float>(seq_len);
  t = t / static_cast<float>(c.max_position);
  t = t - static_cast<float>(s.factor - 1);
  t = std::pow(t, static_cast<float>(exponent));
  const float base = static_cast<float>(r.theta) * t;
  out.inv_freq.resize(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    out.inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(base, e);
  }
  return out;
}

}  // namespace

bool rope_depends_on_length(const RopeScaling& s) {
  return s.type == RopeScaling::Type::dynamic || s.type == RopeScaling::Type::longrope;
}

int64_t rope_length_threshold(const ModelConfig& c, const RopeScaling& s) {
  return s.type == RopeScaling::Type::dynamic ? c.max_position : s.original_max_position;
}

Rope layer_rope(const ModelConfig& c, int index) {
  if (index == 1 && c.local_rope) return *c.local_rope;
  return Rope{c.rope_theta, c.rope};
}

RopeFrequencies rope_frequencies(const ModelConfig& c, const Rope& r, int64_t seq_len) {
  const RopeScaling& s = r.scaling;
  const int64_t dim = c.rotary_dim();
  switch (s.type) {
    case RopeScaling::Type::yarn: return yarn(c, r);
    case RopeScaling::Type::longrope: return longrope(c, r, seq_len);
    case RopeScaling::Type::dynamic: return dynamic(c, r, seq_len);
    default: break;
  }
  RopeFrequencies out;
  out.inv_freq = default_freq(r.theta, dim);
  std::vector<float>& f = out.inv_freq;
  if (s.type == RopeScaling::Type::linear) {
    // Positions divided by the factor = frequencies divided by it.
    for (auto& x : f) x = static_cast<float>(x / s.factor);
  } else if (s.type == RopeScaling::Type::llama3) {
    const double low_wavelen = s.original_max_position / s.low_freq_factor;
    const double high_wavelen = s.original_max_position / s.high_freq_factor;
    for (auto& x : f) {
      const double wavelen = 2 * M_PI / x;
      if (wavelen < high_wavelen) continue;  // high frequencies kept
      if (wavelen > low_wavelen) {
        x = static_cast<float>(x / s.factor);  // low frequencies scaled
      } else {
        const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        x = static_cast<float>((1 - smooth) * x / s.factor + smooth * x);
      }
    }
  }
  return out;
}

std::vector<float> rope_inv_freq(const ModelConfig& c) { return rope_frequencies(c, layer_rope(c, 0)).inv_freq; }

}  // namespace linnet
