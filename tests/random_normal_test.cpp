// core/random_normal.h (the draw the CUDA backend makes random weights with) against
// random_values (the host's, checkpoint/random_weights.cpp): the same hash, uniforms and
// Box–Muller, with log and cos in double rounded to f32 instead of the C library's logf and
// cosf. Checked here, on the host, for a million elements of differently scaled tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "checkpoint/random_weights.h"
#include "core/random_normal.h"

using namespace linnet;

namespace {
uint64_t fnv1a(const std::string& s) {  // random_weights.cpp's key of a tensor name
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

TEST(RandomNormal, TheDeviceDrawIsTheHostDraw) {
  const uint64_t seed = 7;
  struct Case {
    std::string name;
    Shape full;
    float mean, scale;
  };
  const std::vector<Case> cases = {
      {"model.layers.0.self_attn.q_proj.weight", {512, 4096}, 0.f, static_cast<float>(1.0 / std::sqrt(4096.0))},
      {"model.embed_tokens.weight", {256, 1000}, 0.f, 1.f},
      {"model.layers.3.mlp.down_proj.weight", {256, 14336}, 0.f, static_cast<float>(1.0 / std::sqrt(14336.0))}};
  int64_t total = 0, equal = 0, bf16_equal = 0;
  double worst = 0;
  for (const auto& c : cases) {
    const int64_t first = 12345, count = 1 << 18;
    std::vector<float> host(static_cast<size_t>(count));
    random_values(seed, c.name, c.full, first, count, host.data());
    const uint64_t key = random_normal::splitmix64(seed ^ fnv1a(c.name));
    for (int64_t i = 0; i < count; ++i) {
      const float d = random_normal::value(key, static_cast<uint64_t>(first + i), c.mean, c.scale);
      const float h = host[static_cast<size_t>(i)];
      ++total;
      equal += d == h;
      uint32_t bd, bh;
      std::memcpy(&bd, &d, 4);
      std::memcpy(&bh, &h, 4);
      bf16_equal += (bd + 0x7fff + ((bd >> 16) & 1)) >> 16 == (bh + 0x7fff + ((bh >> 16) & 1)) >> 16;
      worst = std::max(worst, std::abs(double(d) - h) / std::max(std::abs(double(h)), 1e-3));
    }
  }
  std::printf("random_normal vs random_values: %lld of %lld equal in f32, %lld in bf16, worst relative %.2e\n",
              static_cast<long long>(equal), static_cast<long long>(total), static_cast<long long>(bf16_equal), worst);
  // Measured here: 98.5% equal in f32 (the rest one or two units in the last place: logf and
  // cosf are not always correctly rounded), every one equal once rounded to bf16.
  EXPECT_GE(equal, total * 97 / 100);
  EXPECT_GE(bf16_equal, total - total / 1000);
  EXPECT_LE(worst, 1e-6);
}
