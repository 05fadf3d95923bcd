// The batch engine's choices next to the logits (SPEC §8): greedy and plain Gumbel-max on
// each vocab shard with only (value, index) pairs crossing ranks; top-k / top-p from each
// shard's best candidates. A row's Philox stream is its own key at row 0 and its own step,
// so its token does not depend on which row of the batch it is in.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/philox.h"
#include "layers/model.h"

namespace linnet {

namespace {

// How many candidates each shard offers a top-p row without top-k; when the nucleus might
// reach past a shard's offer, that row's shard logits are gathered whole.
constexpr int64_t kCandidates = 256;

struct Candidate {
  float logit;
  int32_t index;
};
bool better(const Candidate& a, const Candidate& b) { return a.logit > b.logit || (a.logit == b.logit && a.index < b.index); }

}  // namespace

std::vector<int32_t> Model::choose_rows(const Hidden& hidden, const std::vector<RowChoice>& choices) {
  const int64_t r = hidden.rows, s = comm_.rank();
  const int64_t valid = g_.vocab_valid(s), offset = g_.vocab_begin(s);
  // The f32 logits (before rounding to T): the values logprobs and eval report, so a greedy
  // token is always its own top-1.
  Tensor local = shard_logits(final_hidden(hidden), DType::f32);
  Tensor value = be_.empty({r}, DType::f32), index = be_.empty({r}, DType::i32);
  be_.argmax(local, valid, offset, value, index);
  std::vector<int64_t> filtered;  // rows with top-k or top-p
  for (int64_t i = 0; i < r; ++i) {
    const RowChoice& c = choices[static_cast<size_t>(i)];
    if (c.temperature <= 0) continue;
    if (c.top_k > 0 || c.top_p < 1) {
      filtered.push_back(i);
      continue;
    }
    // Gumbel-max on the row alone (Philox counter row 0), into the row's own entries.
    Tensor v = value.rows(i, i + 1), k = index.rows(i, i + 1);
    be_.gumbel_max(local.rows(i, i + 1), valid, offset, c.key0, c.key1, c.step, c.temperature, v, k);
  }
  auto back = be_.to_host_many({value, index});  // one wait for every row
  Tensor &hv = back[0], &hi = back[1];
  comm_.max_with_index(hv, hi);  // every shard's best → the global best, lowest index on ties
  std::vector<int32_t> out(hi.ptr<int32_t>(), hi.ptr<int32_t>() + r);
  if (filtered.empty()) return out;

  // Top-k / top-p rows: each shard's best `want` logits of the row (value, global index),
  // gathered; the kept set is chosen on every rank alike from them.
  const Tensor host = be_.to_host(local).to(DType::f32);
  const float* lg = host.ptr<float>();
  const int64_t width = local.dim(1);
  for (int64_t i : filtered) {
    const RowChoice& c = choices[static_cast<size_t>(i)];
    const float t = c.temperature;
    int64_t want = c.top_k > 0 ? c.top_k : kCandidates;
    want = std::min(want, g_.vocab_per_shard());
    std::vector<Candidate> mine(static_cast<size_t>(valid));
    for (int64_t k = 0; k < valid; ++k) mine[k] = {lg[i * width + k], static_cast<int32_t>(offset + k)};
    const int64_t take = std::min<int64_t>(want, valid);
    std::partial_sort(mine.begin(), mine.begin() + take, mine.end(), better);
    // The softmax's normaliser over the whole vocab at this temperature: max, then Σ exp.
    Tensor stats = Tensor::zeros({2}, DType::f32);
    float mx = -INFINITY;
    for (int64_t k = 0; k < valid; ++k) mx = std::max(mx, lg[i * width + k] / t);
    Tensor gmax = Tensor::from_floats({1}, {mx});
    comm_.all_reduce_max(gmax);
    const float m = gmax.ptr<float>()[0];
    double se = 0;
    for (int64_t k = 0; k < valid; ++k) se += std::exp(static_cast<double>(lg[i * width + k] / t - m));
    Tensor gse = Tensor::from_floats({1}, {static_cast<float>(se)});
    comm_.all_reduce_sum(gse);
    const double log_z = m + std::log(static_cast<double>(gse.ptr<float>()[0]));
    // Gather every shard's offer: [Shards, want] values and indices (−inf / −1 past its end).
    Tensor offer_v = Tensor::from_floats({want}, std::vector<float>(want, -INFINITY));
    Tensor offer_i = Tensor::from_ints({want}, std::vector<int64_t>(want, -1), DType::i32);
    for (int64_t k = 0; k < take; ++k) {
      offer_v.ptr<float>()[k] = mine[k].logit;
      offer_i.ptr<int32_t>()[k] = mine[k].index;
    }
    Tensor all_v = Tensor::empty({g_.shards, want}, DType::f32), all_i = Tensor::empty({g_.shards, want}, DType::i32);
    comm_.all_gather(offer_v, all_v);
    comm_.all_gather(offer_i, all_i);
    std::vector<Candidate> cand;
    for (int64_t k = 0; k < g_.shards * want; ++k)
      if (all_i.ptr<int32_t>()[k] >= 0) cand.push_back({all_v.ptr<float>()[k], all_i.ptr<int32_t>()[k]});
    std::sort(cand.begin(), cand.end(), better);
    size_t keep = c.top_k > 0 ? std::min<size_t>(cand.size(), static_cast<size_t>(c.top_k)) : cand.size();
    if (c.top_p < 1) {
      double mass = 0;
      size_t n = 0;
      while (n < keep) {
        mass += std::exp(static_cast<double>(cand[n].logit / t) - log_z);
        ++n;
        if (mass >= c.top_p) break;
      }
      // Without top-k, each shard offered only its best kCandidates: when the nucleus did
      // not close within them, the missing candidates could be anywhere; a full shard's
      // offer ends at a logit the nucleus reaches. Then the row's logits are gathered whole.
      bool complete = c.top_k > 0 || mass >= c.top_p;
      if (c.top_k == 0 && complete)
        for (int64_t sh = 0; sh < g_.shards; ++sh) {
          const float last = all_v.ptr<float>()[sh * want + want - 1];
          if (all_i.ptr<int32_t>()[sh * want + want - 1] >= 0 && n > 0 && last >= cand[n - 1].logit && want < g_.vocab_per_shard())
            complete = false;
        }
      if (!complete) {
        Tensor row_v = Tensor::from_floats({width}, std::vector<float>(width, -INFINITY));
        for (int64_t k = 0; k < valid; ++k) row_v.ptr<float>()[k] = lg[i * width + k];
        Tensor every = Tensor::empty({g_.shards, width}, DType::f32);
        comm_.all_gather(row_v, every);
        cand.clear();
        for (int64_t sh = 0; sh < g_.shards; ++sh)
          for (int64_t k = 0; k < g_.vocab_valid(sh); ++k)
            cand.push_back({every.ptr<float>()[sh * width + k], static_cast<int32_t>(g_.vocab_begin(sh) + k)});
        std::sort(cand.begin(), cand.end(), better);
        mass = 0;
        n = 0;
        while (n < cand.size()) {
          mass += std::exp(static_cast<double>(cand[n].logit / t) - log_z);
          ++n;
          if (mass >= c.top_p) break;
        }
      }
      keep = n;
    }
    // Gumbel-max over the kept set: the renormalised distribution, exactly (same draw as
    // the backends' gumbel_max, counter row 0).
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
    out[static_cast<size_t>(i)] = best;
  }
  return out;
}

std::pair<Tensor, std::vector<uint8_t>> Model::score_packed(const Tensor& tokens, const Tensor& positions,
                                                            const Tensor& segments, const Tensor& targets,
                                                            bool want_greedy, TopTokens* top) {
  std::vector<uint8_t> greedy;
  Tensor lp = packed_log_probs(
      "log_probs_packed",
      {{"tokens", tokens}, {"positions", positions}, {"segments", segments}, {"targets", targets}}, nullptr,
      want_greedy ? &greedy : nullptr, top);
  return {lp, greedy};
}

}  // namespace linnet
