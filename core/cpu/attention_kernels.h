// The inner loops of CPU attention for one (token, head): scores against a run of keys, the
// softmax, and the probability-weighted sum of values. AVX-512 where the CPU has it (over head
// dim and four keys at a time, exp in registers), else portable loops; chosen at run time.
// Each depends only on the token's own keys and values, in a fixed order (batch invariance).
#pragma once
#include <cstdint>
#include <vector>

namespace linnet::cpu {

struct AttentionKernels {
  const char* name;
  // scores[j] = scale · q · k_j for j < count; k_j = keys + j · ldk, head_dim floats each.
  void (*scores)(const float* q, const float* keys, int64_t ldk, int64_t count, int64_t head_dim, float scale,
                 float* scores);
  // scores[j] ← exp(scores[j] − max); returns 1 / Σ.
  float (*softmax)(float* scores, int64_t count);
  // out = inv_sum · Σ_j scores[j] · values[j] (head_dim floats each).
  void (*combine)(const float* scores, const float* const* values, int64_t count, int64_t head_dim, float inv_sum,
                  float* out);
};

// The best this CPU has; all of them, best first (tests compare each with the portable one).
const AttentionKernels& attention_kernels();
std::vector<const AttentionKernels*> all_attention_kernels();

}  // namespace linnet::cpu
