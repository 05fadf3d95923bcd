// Philox4x32-10 (Random123) and the uniform/Gumbel draw that sampling uses (docs/entries.md
// "Sampling"). Header-only and host/device-neutral so the CPU and CUDA backends draw the same bits.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LINNET_HD __host__ __device__ __forceinline__
#else
#define LINNET_HD inline
#endif

namespace linnet::philox {

struct U32x4 {
  uint32_t v[4];
};

LINNET_HD uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// Ten rounds with the Random123 multipliers and Weyl constants.
LINNET_HD U32x4 philox4x32_10(U32x4 ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = mulhilo(0xD2511F53u, ctr.v[0], &hi0);
    const uint32_t lo1 = mulhilo(0xCD9E8D57u, ctr.v[2], &hi1);
    ctr = U32x4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

// u in (0, 1) for vocab index k, row b, step i under the 128-bit key (key0, key1) (docs/entries.md
// "Sampling"). Exact in double: in f32, (2^24 − 1) + 0.5 rounds to 2^24 and u would reach 1 (an
// infinite Gumbel draw that picks its token whatever the logits), so u stays in double.
LINNET_HD double uniform(uint64_t key0, uint64_t key1, uint32_t k, uint32_t b, uint32_t i) {
  const uint32_t c3 = static_cast<uint32_t>(key0 >> 32) ^ static_cast<uint32_t>(key1 >> 32);
  const U32x4 out = philox4x32_10(U32x4{{k, b, i, c3}}, static_cast<uint32_t>(key0),
                                  static_cast<uint32_t>(key1));
  return (static_cast<double>(out.v[0] >> 8) + 0.5) * (1.0 / 16777216.0);
}

// The Gumbel noise −log(−log u), computed in double and rounded to f32; the score
// logit/temperature + gumbel is then formed in f32.
LINNET_HD float gumbel(uint64_t key0, uint64_t key1, uint32_t k, uint32_t b, uint32_t i) {
  return static_cast<float>(-log(-log(uniform(key0, key1, k, b, i))));
}

}  // namespace linnet::philox
