#include "checkpoint/random_weights.h"

#include <cmath>
#include <cstring>
#include <vector>


namespace linnet {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mix.
uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
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
  const float fscale = static_cast<float>(scale);
  const uint64_t key = splitmix64(seed ^ fnv1a(name));
#pragma omp parallel for if (count > 65536)
  for (int64_t i = 0; i < count; ++i) {
    // One 64-bit hash of (tensor, element index), Box–Muller on its two 24-bit halves, in f32:
    // a weight needs no cryptographic stream nor a correctly rounded normal, and this makes
    // Llama-3-8B's 8 billion weights in seconds where Philox and double math took minutes.
    const uint64_t r = splitmix64(key ^ static_cast<uint64_t>(first + i));
    const float u1 = (static_cast<float>(r >> 40) + 0.5f) * 0x1p-24f;
    const float u2 = (static_cast<float>(r & 0xffffff) + 0.5f) * 0x1p-24f;
    const float z = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
    out[i] = (norm ? 1.0f : 0.0f) + fscale * z;
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
    // A part of a fused tensor: the stored tensor's values from the part's first row.
    random_values(seed_, p.hf_name, p.stored_shape(), (p.row_offset + b) * row, (e - b) * row,
                  v.data());  // padding rows stay 0
  } else {
    const auto [b, e] = p.shard_range(shard);
    const int64_t cols = p.full[1], w = e - b;
    for (int64_t r = 0; r < p.full[0]; ++r) random_values(seed_, p.hf_name, p.full, r * cols + b, w, v.data() + r * w);
  }
  return Tensor::from_floats(shape, v, dtype_);
}

}  // namespace linnet
