// Scoring packed tokens (log_probs_packed, loss_packed, and the batch engine's score_packed):
// log p(target) per token from f32 logits in chunks, each shard on its own vocab rows, with
// greedy flags, the top-n and ranks a server's logprobs report.
#include <algorithm>
#include <cmath>
#include <limits>

#include "layers/model.h"

namespace linnet {

namespace {

constexpr int64_t kNoSkip = std::numeric_limits<int64_t>::min();

}  // namespace

Tensor Model::packed_log_probs(const std::string& entry, const EntryArgs& args, const Tensor* weights,
                               std::vector<uint8_t>* greedy, TopTokens* top) {
  EntryCheck c(entry, args, g_);
  c.in_range("tokens", 0, g_.vocab, "Vocab", kNoSkip);
  c.in_range("positions", 0, std::numeric_limits<int32_t>::max(), "i32 max", kNoSkip);
  const auto start = packed_runs(c);
  const auto ids = c.values("tokens"), pos = c.values("positions"), tgt = c.values("targets");
  const int64_t n = static_cast<int64_t>(ids.size());
  const auto w = weights ? weights->to_floats() : std::vector<float>(ids.size(), 1.0f);
  for (int64_t p = 0; p < n; ++p) {
    if (!std::isfinite(w[p])) c.fail(str(c.at("weights", p), " = ", w[p], " is not finite"));
    const bool counted = weights ? w[p] != 0 : tgt[p] >= 0;
    if (counted && (tgt[p] < 0 || tgt[p] >= g_.vocab))
      c.fail(str(c.at("targets", p), " = ", tgt[p], " is outside [0, Vocab=", g_.vocab, ")",
                 weights ? str(" (its weight is ", w[p], ")") : std::string(" (negative targets are skipped)")));
  }
  TokenPlan plan;
  for (int64_t p = 0; p < n; ++p) plan.add(static_cast<int32_t>(ids[p]), static_cast<int32_t>(pos[p]), start[p], -1, -1);
  Tensor x = net_.run(plan, nullptr).x;

  // Only the tokens whose targets count go through the lm_head, in chunks, so no rank ever
  // holds a [P, Vocab] block of logits (docs/entries.md "Numbers").
  std::vector<int64_t> scored;
  for (int64_t p = 0; p < n; ++p)
    if (weights ? w[p] != 0 : tgt[p] >= 0) scored.push_back(p);
  constexpr int64_t kChunk = 128;
  const int64_t s = comm_.rank(), n_scored = static_cast<int64_t>(scored.size());
  Tensor out = Tensor::zeros({n}, DType::f32);
  if (greedy) greedy->assign(static_cast<size_t>(n), 0);
  const int64_t top_n = top ? std::min(top->n, g_.vocab) : 0;
  if (top) {
    top->ids.assign(static_cast<size_t>(n * top->n), -1);
    top->logprobs.assign(static_cast<size_t>(n * top->n), -INFINITY);
    if (top->want_ranks) top->ranks.assign(static_cast<size_t>(n), 0);
  }
  // (Pipeline stages: the last stage scores; its results go to every stage below.)
  for (int64_t c0 = 0; net_.runs_head() && c0 < n_scored; c0 += kChunk) {
    const int64_t c1 = std::min(n_scored, c0 + kChunk), m = c1 - c0;
    std::vector<int32_t> select, target;
    for (int64_t q = c0; q < c1; ++q) {
      select.push_back(static_cast<int32_t>(scored[q]));
      target.push_back(static_cast<int32_t>(tgt[scored[q]]));
    }
    Tensor local = net_.shard_logits(net_.final_hidden(x, select), DType::f32);  // CE from f32 logits
    Tensor mx = be_.empty({m}, DType::f32), se = be_.empty({m}, DType::f32), tl = be_.empty({m}, DType::f32);
    be_.logit_stats(local, g_.vocab_valid(s), g_.vocab_begin(s), net_.upload_ints(target), mx, se, tl);
    Tensor hmx = be_.to_host(mx), hse = be_.to_host(se), htl = be_.to_host(tl);
    if (greedy) {  // the argmax across shards (lowest index on ties), as the logits say
      const std::vector<int32_t> best = sampler_.argmax(local);
      for (int64_t i = 0; i < m; ++i) (*greedy)[static_cast<size_t>(scored[c0 + i])] = best[i] == target[i];
    }
    // log Σ_k exp(l_k) over all shards = M + log Σ_shards sumexp·exp(max − M).
    Tensor global_max = hmx.clone();
    comm_.all_reduce_max(global_max);
    for (int64_t i = 0; i < m; ++i)
      hse.ptr<float>()[i] *= std::exp(hmx.ptr<float>()[i] - global_max.ptr<float>()[i]);
    comm_.all_reduce_sum(hse);
    comm_.all_reduce_sum(htl);  // the target's logit lives on one shard; the others add 0
    for (int64_t i = 0; i < m; ++i)
      out.ptr<float>()[scored[c0 + i]] = htl.ptr<float>()[i] - global_max.ptr<float>()[i] - std::log(hse.ptr<float>()[i]);
    if (top_n > 0) top_tokens(local, top_n, global_max, hse, scored, c0, *top);
    if (top && top->want_ranks) {  // each shard counts its logits ≥ the target's; summed
      const Tensor host = be_.to_host(local);
      const int64_t width = local.dim(1), valid = g_.vocab_valid(s);
      Tensor count = Tensor::zeros({m}, DType::f32);  // exact: a vocab is below 2^24
      for (int64_t i = 0; i < m; ++i) {
        const float t = htl.ptr<float>()[i];
        int64_t c = 0;
        for (int64_t k = 0; k < valid; ++k) c += host.ptr<float>()[i * width + k] >= t;
        count.ptr<float>()[i] = static_cast<float>(c);
      }
      comm_.all_reduce_sum(count);
      for (int64_t i = 0; i < m; ++i)
        top->ranks[static_cast<size_t>(scored[c0 + i])] = static_cast<int64_t>(count.ptr<float>()[i]);
    }
  }
  share_scores(out, greedy, top);
  return out;
}

void Model::share_scores(Tensor& out, std::vector<uint8_t>* greedy, TopTokens* top) {
  net_.from_head(out);
  auto share_ints = [&](auto& v) {
    std::vector<int32_t> w(v.begin(), v.end());
    net_.from_head(w);
    std::copy(w.begin(), w.end(), v.begin());
  };
  if (greedy) share_ints(*greedy);
  if (!top) return;
  share_ints(top->ids);
  if (top->want_ranks) {
    // (ranks are counts below 2^31: a vocab)
    std::vector<int32_t> r(top->ranks.begin(), top->ranks.end());
    net_.from_head(r);
    std::copy(r.begin(), r.end(), top->ranks.begin());
  }
  Tensor lp = Tensor::from_floats({static_cast<int64_t>(top->logprobs.size())}, top->logprobs);
  net_.from_head(lp);
  std::copy(lp.ptr<float>(), lp.ptr<float>() + lp.numel(), top->logprobs.begin());
}

// The n most likely tokens of each scored row: every shard's best top_n offered and merged
// (Sampler::offers), their log-probabilities from the chunk's global max and Σ exp.
void Model::top_tokens(const Tensor& local, int64_t top_n, const Tensor& global_max, const Tensor& sumexp,
                       const std::vector<int64_t>& scored, int64_t c0, TopTokens& top) {
  const int64_t m = local.dim(0);
  const Tensor host = be_.to_host(local);
  const Offers o = sampler_.offers(host.ptr<float>(), m, local.dim(1), top_n);
  for (int64_t i = 0; i < m; ++i) {
    const std::vector<Candidate>& cand = o.merged[static_cast<size_t>(i)];
    const size_t p = static_cast<size_t>(scored[c0 + i]);
    for (size_t k = 0; k < cand.size() && static_cast<int64_t>(k) < top_n; ++k) {
      top.ids[p * top.n + k] = cand[k].index;
      top.logprobs[p * top.n + k] = cand[k].logit - global_max.ptr<float>()[i] - std::log(sumexp.ptr<float>()[i]);
    }
  }
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
