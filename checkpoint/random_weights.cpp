#include "checkpoint/random_weights.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/backend.h"


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

namespace {
// Device matrices kept by keep_device_matrices(true), by seed, dtype, shard and name.
std::mutex g_kept_mu;
bool g_keep = false;
std::map<std::string, Tensor> g_kept;
}  // namespace

void RandomWeights::keep_device_matrices(bool on) {
  std::lock_guard lock(g_kept_mu);
  g_keep = on;
  if (!on) g_kept.clear();
}

// The shard's slice made on the device: random_values' elements (the same key, scale and
// mean; core/random_normal.h's draw), rows past the stored extent zero.
Tensor RandomWeights::device_matrix(const ParamSpec& p, int64_t shard) {
  const std::string id = str(seed_, "/", dtype_name(dtype_), "/", shard, "/", device_->name(), "/", p.hf_name);
  {
    std::lock_guard lock(g_kept_mu);
    if (auto it = g_kept.find(id); it != g_kept.end()) return it->second;
  }
  const Shape shape = p.shard_shape();
  const bool norm = ends_with(p.hf_name, "norm.weight"), bias = ends_with(p.hf_name, ".bias");
  const bool embed = p.hf_name.find("embed_tokens") != std::string::npos;
  const double fan_in = static_cast<double>(p.full[1]);
  const float scale = static_cast<float>(norm ? 0.1 : bias ? 0.1 : embed ? 1.0 : 1.0 / std::sqrt(fan_in));
  const uint64_t key = splitmix64(seed_ ^ fnv1a(p.hf_name));
  Tensor t = device_->empty(shape, dtype_);
  bool made = false;
  if (p.split == Split::columns) {
    const auto [b, e] = p.shard_range(shard);
    made = device_->random_normal(t, key, b, p.full[1], norm ? 1.f : 0.f, scale);
  } else {
    const auto [b, e] = p.split == Split::rows ? p.shard_range(shard) : std::pair<int64_t, int64_t>{0, p.full[0]};
    if (e - b < shape[0]) device_->fill_zero(t);  // lm_head's padding rows
    Tensor rows = t.rows(0, e - b);
    made = device_->random_normal(rows, key, b * p.full[1], p.full[1], norm ? 1.f : 0.f, scale);
  }
  if (!made) return {};
  std::lock_guard lock(g_kept_mu);
  if (g_keep) g_kept.emplace(id, t);
  return t;
}

Tensor RandomWeights::read(const ParamSpec& p, int64_t shard) {
  // LINNET_RANDOM_WEIGHTS=host: every value made on the host, as before (the device path's
  // switch back, for comparisons).
  const char* where = std::getenv("LINNET_RANDOM_WEIGHTS");  // read each time: a sweep may set it
  const bool host_only = where && std::string(where) == "host";
  if (device_ && !host_only && p.full.rank() == 2 && !p.stored.rank())  // (a fused tensor's part: on the host)
    if (Tensor t = device_matrix(p, shard); t.defined()) return t;
  const Shape shape = p.shard_shape();
  std::vector<float> v(static_cast<size_t>(shape.numel()), 0.0f);
  const int64_t part_first = p.row_offset * (p.full.numel() / std::max<int64_t>(1, p.full[0]));  // a part's first value
  if (p.split == Split::mirrored || p.split == Split::expert) {
    random_values(seed_, p.hf_name, p.stored_shape(), part_first, p.full.numel(), v.data());
  } else if (p.split == Split::rows && p.row_block > 0) {
    const auto [b, e] = p.shard_range(shard);
    const int64_t row = p.full.numel() / p.full[0];
    float* at = v.data();
    for (const auto& [r0, r1] : p.stored_row_ranges(b, e)) {  // a strided part: block by block
      random_values(seed_, p.hf_name, p.stored_shape(), r0 * row, (r1 - r0) * row, at);
      at += (r1 - r0) * row;
    }
  } else if (p.split == Split::rows) {
    const auto [b, e] = p.shard_range(shard);
    const int64_t row = p.full.numel() / p.full[0];
    // A part of a fused tensor: the stored tensor's values from the part's first row.
    random_values(seed_, p.hf_name, p.stored_shape(), (p.row_offset + b) * row, (e - b) * row,
                  v.data());  // padding rows stay 0
  } else {
    const auto [b, e] = p.shard_range(shard);
    const int64_t cols = p.full[1], w = e - b;
    for (int64_t r = 0; r < p.full[0]; ++r)
      random_values(seed_, p.hf_name, p.stored_shape(), part_first + r * cols + b, w, v.data() + r * w);
  }
  return Tensor::from_floats(shape, v, dtype_);
}

}  // namespace linnet
