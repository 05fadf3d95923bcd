// DeepSeek's choice of experts for one token, as transformers 5.24's DeepseekV3TopkRouter (and
// Glm4MoeTopkRouter, Mistral 4's, DeepseekV2TopkRouter) compute it, written once for the CPU
// and the CUDA kernel (core/cuda/moe.cu) with core/top_k.h's torch.topk:
//   scores  = sigmoid(logits) (V3, GLM-4.5, Mistral 4), or the row as given (V2: its softmax);
//   choice  = scores + e_score_correction_bias (where the checkpoint has one), else scores;
//   groups  (n_group G > 1): each of G runs of E/G consecutive experts scores the sum of its
//           two best choices (torch.topk(2).sum: V3) or its best (V2's group_limited_greedy);
//           the topk_group best groups by torch.topk(sorted=False), every other expert's
//           choice set to `masked` (−inf; V2: 0);
//   experts = torch.topk(choice, k, sorted=False) (its order: introselect's, core/top_k.h);
//   weights = scores at those experts (without the bias), ÷ (their sum in that order + 1e−20)
//             where normalize (norm_topk_prob), then × scale (routed_scaling_factor).
// All in f32. n, k small (a layer's experts).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/top_k.h"

namespace linnet {

struct ExpertChoice {
  bool sigmoid = true;     // scores = sigmoid(row), else the row itself
  int64_t groups = 1;      // n_group
  int64_t keep_groups = 1; // topk_group
  bool group_top2 = true;  // a group's score: its two best choices summed, else its best
  float masked = -INFINITY;
  bool normalize = false;  // norm_topk_prob
  float scale = 1.0f;      // routed_scaling_factor
  // V2: the weights are topk's values (a masked expert's `masked`); else the scores at the
  // chosen experts (V3 gathers them: the bias and the mask choose, they do not weigh).
  bool weights_of_choices = false;
  bool operator==(const ExpertChoice&) const = default;
};

namespace topk {

constexpr int64_t kMaxExpertGroups = 1024;

// One row: row [E] f32 (logits, or scores as given), bias [E] or null; scratch: e of E + groups
// entries, scores of E. Writes weights [k] and experts [k] in torch's order. 1 ≤ k ≤
// keep_groups · E / groups; groups divides E, at most kMaxExpertGroups; with group_top2 each
// group has 2 experts or more (core/op_checks.cpp).
LINNET_TOPK_HD void choose_experts(const float* row, const float* bias, const ExpertChoice& r, int64_t E, int64_t k,
                                   Entry* e, float* scores, float* weights, int32_t* experts) {
  for (int64_t i = 0; i < E; ++i) {
    // torch's sigmoid: 1 / (1 + exp(−x)) in f32.
    const float s = r.sigmoid ? 1.0f / (1.0f + expf(-row[i])) : row[i];
    scores[i] = s;
    e[i] = {bias ? s + bias[i] : s, static_cast<int32_t>(i)};
  }
  if (r.groups > 1) {
    const int64_t per = E / r.groups;
    Entry* g = e + E;  // the groups' entries, after the experts'
    for (int64_t q = 0; q < r.groups; ++q) {
      float best = -INFINITY, second = -INFINITY;  // the two largest by torch's comparator (NaN first)
      for (int64_t i = q * per; i < (q + 1) * per; ++i) {
        const float v = e[i].value;
        if (before(Entry{v, 0}, Entry{best, 0})) {
          second = best;
          best = v;
        } else if (before(Entry{v, 0}, Entry{second, 0})) {
          second = v;
        }
      }
      g[q] = {r.group_top2 ? best + second : best, static_cast<int32_t>(q)};
    }
    torch_top_k(g, r.groups, r.keep_groups, false);
    bool kept[kMaxExpertGroups] = {};
    for (int64_t j = 0; j < r.keep_groups; ++j) kept[g[j].index] = true;
    for (int64_t i = 0; i < E; ++i)
      if (!kept[i / per]) e[i].value = r.masked;
  }
  torch_top_k(e, E, k, false);
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    experts[j] = e[j].index;
    weights[j] = r.weights_of_choices ? e[j].value : scores[e[j].index];
    sum += weights[j];
  }
  for (int64_t j = 0; j < k; ++j) {
    float w = weights[j];
    if (r.normalize) w = w / (sum + 1e-20f);
    weights[j] = w * r.scale;
  }
}

}  // namespace topk
}  // namespace linnet
