#include "layers/rope.h"

#include <cmath>

namespace linnet {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int64_t d = c.head_dim();
  std::vector<float> f(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) {
    // HF: 1 / base ** (arange(0, d, 2).float() / d), the power taken in f32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(d);
    f[i] = 1.0f / std::pow(static_cast<float>(c.rope_theta), exponent);
  }
  const RopeScaling& s = c.rope;
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
  return f;
}

}  // namespace linnet
