#include "checkpoint/random_weights.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/philox.h"

namespace linnet {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool ends_with(const std::string& s, const char* tail) {
  const size_t n = std::strlen(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

}  // namespace

void random_values(uint64_t seed, const std::string& name, const Shape& full, int64_t first, int64_t count, float* out) {
  // Scales that keep activations O(1) through the layers and logits spread, so bugs show:
  // norms near 1, linear weights ~ 1/sqrt(fan_in), embeddings ~ 1.
  const bool norm = ends_with(name, "norm.weight"), bias = ends_with(name, ".bias");
  const bool embed = name.find("embed_tokens") != std::string::npos;
  const double fan_in = full.rank() == 2 ? static_cast<double>(full[1]) : 1.0;
  const double scale = norm ? 0.1 : bias ? 0.1 : embed ? 1.0 : 1.0 / std::sqrt(fan_in);
  const uint64_t h = fnv1a(name);
  const uint32_t k0 = static_cast<uint32_t>(seed ^ h), k1 = static_cast<uint32_t>((seed >> 32) ^ (h >> 32));
#pragma omp parallel for if (count > 65536)
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t idx = static_cast<uint64_t>(first + i);
    const auto r = philox::philox4x32_10(
        philox::U32x4{{static_cast<uint32_t>(idx), static_cast<uint32_t>(idx >> 32), 0x5eedu, 0}}, k0, k1);
    // Box–Muller on two 32-bit uniforms in (0, 1).
    const double u1 = (static_cast<double>(r.v[0]) + 0.5) / 4294967296.0;
    const double u2 = (static_cast<double>(r.v[1]) + 0.5) / 4294967296.0;
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    out[i] = static_cast<float>((norm ? 1.0 : 0.0) + scale * z);
  }
}

Tensor RandomWeights::read(const ParamSpec& p, int64_t shard) {
  const Shape shape = p.shard_shape();
  std::vector<float> v(static_cast<size_t>(shape.numel()), 0.0f);
  if (p.split == Split::mirrored) {
    random_values(seed_, p.hf_name, p.full, 0, p.full.numel(), v.data());
  } else if (p.split == Split::rows) {
    const auto [b, e] = p.shard_range(shard);
    const int64_t row = p.full.numel() / p.full[0];
    random_values(seed_, p.hf_name, p.full, b * row, (e - b) * row, v.data());  // padding rows stay 0
  } else {
    const auto [b, e] = p.shard_range(shard);
    const int64_t cols = p.full[1], w = e - b;
    for (int64_t r = 0; r < p.full[0]; ++r) random_values(seed_, p.hf_name, p.full, r * cols + b, w, v.data() + r * w);
  }
  return Tensor::from_floats(shape, v, dtype_);
}

}  // namespace linnet
