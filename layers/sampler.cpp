#include "layers/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/philox.h"

namespace linnet {

namespace {

// How many candidates each shard offers a top-p row without top-k; when the nucleus might
// reach past a shard's offer, that row's shard logits are gathered whole.
constexpr int64_t kCandidates = 256;

}  // namespace

std::vector<int32_t> Sampler::argmax(const Tensor& local) {
  const int64_t r = local.dim(0), s = comm_.rank();
  Tensor value = be_.empty({r}, DType::f32), index = be_.empty({r}, DType::i32);
  be_.argmax(local, g_.vocab_valid(s), g_.vocab_begin(s), value, index);
  auto back = be_.to_host_many({value, index});  // one wait
  comm_.max_with_index(back[0], back[1]);  // each shard's best → the global best, lowest index on ties
  return {back[1].ptr<int32_t>(), back[1].ptr<int32_t>() + r};
}

std::vector<int32_t> Sampler::choose(const Tensor& local, float temperature, uint64_t key0, uint64_t key1,
                                     int32_t step) {
  if (temperature <= 0) return argmax(local);
  const int64_t r = local.dim(0), s = comm_.rank();
  Tensor value = be_.empty({r}, DType::f32), index = be_.empty({r}, DType::i32);
  be_.gumbel_max(local, g_.vocab_valid(s), g_.vocab_begin(s), key0, key1, step, temperature, value, index);
  auto back = be_.to_host_many({value, index});  // one wait
  comm_.max_with_index(back[0], back[1]);
  return {back[1].ptr<int32_t>(), back[1].ptr<int32_t>() + r};
}

std::vector<int32_t> Sampler::choose_rows(const Tensor& local, const std::vector<RowChoice>& choices) {
  const int64_t r = local.dim(0), s = comm_.rank();
  const int64_t valid = g_.vocab_valid(s), offset = g_.vocab_begin(s);
  Tensor value = be_.empty({r}, DType::f32), index = be_.empty({r}, DType::i32);
  be_.argmax(local, valid, offset, value, index);
  // Rows whose logits are processed or warped: on the host, from this shard's copy. The others
  // choose on the device.
  auto warped = [](const RowChoice& c) { return c.temperature > 0 && (c.top_k > 0 || c.top_p < 1 || c.min_p > 0); };
  std::vector<int64_t> on_host;
  for (int64_t i = 0; i < r; ++i) {
    const RowChoice& c = choices[static_cast<size_t>(i)];
    if (c.processors.any() || warped(c)) {
      on_host.push_back(i);
      continue;
    }
    if (c.temperature <= 0) continue;
    // Gumbel-max on the row alone (Philox counter row 0), into the row's own entries.
    Tensor v = value.rows(i, i + 1), k = index.rows(i, i + 1);
    be_.gumbel_max(local.rows(i, i + 1), valid, offset, c.key0, c.key1, c.step, c.temperature, v, k);
  }
  auto back = be_.to_host_many(on_host.empty() ? std::vector<Tensor>{value, index}
                                               : std::vector<Tensor>{value, index, local});  // one wait
  Tensor &hv = back[0], &hi = back[1];
  const int64_t width = local.dim(1);
  // Each host row's processed logits on this shard; greedy and plain Gumbel rows take this
  // shard's best of them into the (value, index) pairs the ranks compare.
  std::map<int64_t, std::vector<float>> rows;
  for (int64_t i : on_host) {
    const RowChoice& c = choices[static_cast<size_t>(i)];
    const float* in = back[2].ptr<float>() + i * width;
    std::vector<float>& l = rows[i] = std::vector<float>(in, in + valid);
    apply_logit_processors(c.processors, l.data(), offset, valid);
    if (warped(c)) continue;  // chosen below, from every shard's candidates
    float best_v = -INFINITY;
    int32_t best = static_cast<int32_t>(offset);
    for (int64_t k = 0; k < valid; ++k) {
      const float sc = c.temperature > 0 ? l[k] / c.temperature + philox::gumbel(c.key0, c.key1,
                                                                                 static_cast<uint32_t>(offset + k), 0,
                                                                                 static_cast<uint32_t>(c.step))
                                         : l[k];
      if (sc > best_v) best_v = sc, best = static_cast<int32_t>(offset + k);
    }
    hv.ptr<float>()[i] = best_v;
    hi.ptr<int32_t>()[i] = best;
  }
  comm_.max_with_index(hv, hi);  // every shard's best → the global best, lowest index on ties
  std::vector<int32_t> out(hi.ptr<int32_t>(), hi.ptr<int32_t>() + r);
  for (int64_t i : on_host)
    if (warped(choices[static_cast<size_t>(i)])) out[static_cast<size_t>(i)] = choose_warped(choices[static_cast<size_t>(i)], rows[i]);
  return out;
}

Offers Sampler::offers(const float* rows, int64_t m, int64_t width, int64_t n) {
  const int64_t s = comm_.rank(), valid = g_.vocab_valid(s), offset = g_.vocab_begin(s), shards = g_.shards;
  // This shard's offer: [m, n] values and indices (−inf / −1 past what it has).
  Tensor offer_v = Tensor::from_floats({m * n}, std::vector<float>(static_cast<size_t>(m * n), -INFINITY));
  Tensor offer_i = Tensor::from_ints({m * n}, std::vector<int64_t>(static_cast<size_t>(m * n), -1), DType::i32);
  std::vector<Candidate> row(static_cast<size_t>(valid));
  const int64_t take = std::min(n, valid);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t k = 0; k < valid; ++k) row[k] = {rows[i * width + k], static_cast<int32_t>(offset + k)};
    std::partial_sort(row.begin(), row.begin() + take, row.end(), better);
    for (int64_t k = 0; k < take; ++k) {
      offer_v.ptr<float>()[i * n + k] = row[k].logit;
      offer_i.ptr<int32_t>()[i * n + k] = row[k].index;
    }
  }
  Tensor all_v = Tensor::empty({shards, m * n}, DType::f32), all_i = Tensor::empty({shards, m * n}, DType::i32);
  comm_.all_gather(offer_v, all_v);
  comm_.all_gather(offer_i, all_i);
  Offers out;
  out.merged.resize(static_cast<size_t>(m));
  out.last.assign(static_cast<size_t>(m * shards), -INFINITY);
  for (int64_t i = 0; i < m; ++i) {
    std::vector<Candidate>& cand = out.merged[static_cast<size_t>(i)];
    for (int64_t sh = 0; sh < shards; ++sh) {
      for (int64_t k = 0; k < n; ++k) {
        const int64_t at = sh * m * n + i * n + k;
        if (all_i.ptr<int32_t>()[at] >= 0) cand.push_back({all_v.ptr<float>()[at], all_i.ptr<int32_t>()[at]});
      }
      const int64_t last = sh * m * n + i * n + n - 1;
      if (all_i.ptr<int32_t>()[last] >= 0) out.last[static_cast<size_t>(i * shards + sh)] = all_v.ptr<float>()[last];
    }
    std::sort(cand.begin(), cand.end(), better);
  }
  return out;
}

// A sampled row with top-k / top-p / min-p, from its processed logits `l` on this shard: each
// shard offers its best `want` logits (value, global index), gathered; the kept set is chosen on
// every rank alike from them, and Gumbel-max over it samples the renormalised distribution.
int32_t Sampler::choose_warped(const RowChoice& c, const std::vector<float>& l) {
  const int64_t s = comm_.rank(), valid = g_.vocab_valid(s);
  const float t = c.temperature;
  const Warpers warpers{t, c.top_k, c.top_p, c.min_p};
  const int64_t want = std::min(c.top_k > 0 ? c.top_k : kCandidates, g_.vocab_per_shard());
  // The softmax's normaliser over the whole vocab at this temperature (top-p): max, then Σ exp.
  float mx = -INFINITY;
  for (int64_t k = 0; k < valid; ++k) mx = std::max(mx, l[k] / t);
  Tensor gmax = Tensor::from_floats({1}, {mx});
  comm_.all_reduce_max(gmax);
  const float m = gmax.ptr<float>()[0];
  double se = 0;
  for (int64_t k = 0; k < valid; ++k) se += std::exp(static_cast<double>(l[k] / t - m));
  Tensor gse = Tensor::from_floats({1}, {static_cast<float>(se)});
  comm_.all_reduce_sum(gse);
  const double log_z = m + std::log(static_cast<double>(gse.ptr<float>()[0]));
  Offers o = offers(l.data(), 1, valid, want);
  std::vector<Candidate>& cand = o.merged[0];
  auto kept = [&] {
    std::vector<float> sorted(cand.size());
    for (size_t n = 0; n < cand.size(); ++n) sorted[n] = cand[n].logit;
    return kept_candidates(warpers, sorted, log_z);
  };
  size_t keep = kept();
  // Without top-k each shard offered only its best kCandidates: when a full offer's last
  // candidate is kept, the kept set may reach past what was offered. Then the row's logits
  // are gathered whole (so the kept set is exact).
  bool complete = true;
  for (int64_t sh = 0; c.top_k == 0 && sh < g_.shards; ++sh)
    if (g_.vocab_valid(sh) > want && o.last[static_cast<size_t>(sh)] >= cand[keep - 1].logit) complete = false;
  if (!complete) {
    const int64_t width = g_.vocab_per_shard();
    Tensor row_v = Tensor::from_floats({width}, std::vector<float>(width, -INFINITY));
    for (int64_t k = 0; k < valid; ++k) row_v.ptr<float>()[k] = l[k];
    Tensor every = Tensor::empty({g_.shards, width}, DType::f32);
    comm_.all_gather(row_v, every);
    cand.clear();
    for (int64_t sh = 0; sh < g_.shards; ++sh)
      for (int64_t k = 0; k < g_.vocab_valid(sh); ++k)
        cand.push_back({every.ptr<float>()[sh * width + k], static_cast<int32_t>(g_.vocab_begin(sh) + k)});
    std::sort(cand.begin(), cand.end(), better);
    keep = kept();
  }
  // Gumbel-max over the kept set: the renormalised distribution, exactly (the same draw as the
  // backends' gumbel_max, counter row 0).
  float best_v = -INFINITY;
  int32_t best = cand.empty() ? 0 : cand[0].index;
  for (size_t n = 0; n < keep; ++n) {
    const float sc = cand[n].logit / t + philox::gumbel(c.key0, c.key1, static_cast<uint32_t>(cand[n].index), 0,
                                                        static_cast<uint32_t>(c.step));
    if (sc > best_v || (sc == best_v && cand[n].index < best)) {
      best_v = sc;
      best = cand[n].index;
    }
  }
  return best;
}

}  // namespace linnet
