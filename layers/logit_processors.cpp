#include "layers/logit_processors.h"

#include <algorithm>
#include <cmath>

namespace linnet {

namespace {
// Calls f(k, item) for each item whose id lies in [offset, offset + n); items sorted by id.
template <typename T, typename Id, typename F>
void in_shard(std::span<const T> items, Id id_of, int64_t offset, int64_t n, F f) {
  auto first = std::lower_bound(items.begin(), items.end(), offset,
                                [&](const T& x, int64_t v) { return static_cast<int64_t>(id_of(x)) < v; });
  for (auto it = first; it != items.end() && id_of(*it) < offset + n; ++it) f(id_of(*it) - offset, *it);
}
}  // namespace

void apply_logit_processors(const LogitProcessors& p, float* logits, int64_t offset, int64_t n) {
  in_shard(p.bias, [](const auto& b) { return b.first; }, offset, n,
           [&](int64_t k, const auto& b) { logits[k] += b.second; });
  if (p.repetition_penalty != 1) {
    const float r = p.repetition_penalty;
    in_shard(p.seen, [](int32_t id) { return id; }, offset, n, [&](int64_t k, int32_t) {
      logits[k] = logits[k] < 0 ? logits[k] * r : logits[k] / r;  // transformers' torch.where(score < 0, …)
    });
  }
  if (p.presence_penalty != 0 || p.frequency_penalty != 0)
    in_shard(p.counts, [](const auto& c) { return c.first; }, offset, n, [&](int64_t k, const auto& c) {
      logits[k] -= p.frequency_penalty * static_cast<float>(c.second) + p.presence_penalty;
    });
  in_shard(p.banned, [](int32_t id) { return id; }, offset, n, [&](int64_t k, int32_t) { logits[k] = -INFINITY; });
}

size_t kept_candidates(const Warpers& w, std::span<const float> l, double log_z) {
  if (l.empty()) return 0;
  size_t keep = w.top_k > 0 ? std::min(l.size(), static_cast<size_t>(w.top_k)) : l.size();
  if (w.top_k > 0) {
    // top_p after top_k reads the distribution top_k left, renormalised (transformers' warpers
    // in turn, vLLM's apply_top_k_top_p).
    const double top = static_cast<double>(l[0] / w.temperature);
    double se = 0;
    for (size_t n = 0; n < keep; ++n) se += std::exp(static_cast<double>(l[n] / w.temperature) - top);
    log_z = top + std::log(se);
  }
  if (w.top_p < 1) {
    double mass = 0;
    size_t n = 0;
    while (n < keep) {
      mass += std::exp(static_cast<double>(l[n] / w.temperature) - log_z);
      ++n;
      if (mass >= w.top_p) break;
    }
    keep = n;
  }
  if (w.min_p > 0) {
    // transformers' MinPLogitsWarper: probability < min_p × the top probability is dropped; the
    // ratio of two probabilities is exp of their scores' difference, whatever the normaliser.
    const float top = l[0] / w.temperature;
    size_t n = 1;
    while (n < keep && std::exp(l[n] / w.temperature - top) >= w.min_p) ++n;
    keep = n;
  }
  return std::max<size_t>(keep, 1);
}

std::vector<int32_t> distinct_ids(std::span<const int32_t> tokens) {
  std::vector<int32_t> out(tokens.begin(), tokens.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::pair<int32_t, int32_t>> id_counts(std::span<const int32_t> tokens) {
  std::vector<std::pair<int32_t, int32_t>> out;
  for (int32_t t : tokens) add_count(out, t);
  return out;
}

void add_seen(std::vector<int32_t>& seen, int32_t id) {
  auto it = std::lower_bound(seen.begin(), seen.end(), id);
  if (it == seen.end() || *it != id) seen.insert(it, id);
}

void add_count(std::vector<std::pair<int32_t, int32_t>>& counts, int32_t id) {
  auto it = std::lower_bound(counts.begin(), counts.end(), id, [](const auto& c, int32_t v) { return c.first < v; });
  if (it != counts.end() && it->first == id) ++it->second;
  else counts.insert(it, {id, 1});
}

}  // namespace linnet
