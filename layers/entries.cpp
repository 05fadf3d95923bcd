// The 17 entries (docs/entries.md "The entries"): each checks its inputs (docs/entries.md "Bad
// input"), describes its tokens as a TokenPlan, runs the layers once, and reads out logits, hidden
// states or choices.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "layers/model.h"

namespace linnet {

namespace {

constexpr int64_t kNoSkip = std::numeric_limits<int64_t>::min();

}  // namespace

namespace {
TokenPlan rows_as_runs(const std::vector<int64_t>& ids, int64_t s);
}

// ---- stateless ----

namespace {
// Rows of B×S tokens, each row its own run at positions 0…S-1: forward's and next_token's plan.
TokenPlan rows_as_runs(const std::vector<int64_t>& ids, int64_t s) {
  TokenPlan plan;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t at = static_cast<int64_t>(i) % s;
    plan.add(static_cast<int32_t>(ids[i]), static_cast<int32_t>(at), static_cast<int32_t>(i - at), -1, -1);
  }
  return plan;
}
}  // namespace

Tensor Model::forward(const Tensor& tokens) {
  EntryCheck c("forward", {{"tokens", tokens}}, g_);
  c.in_range("tokens", 0, g_.vocab, "Vocab", kNoSkip);
  const int64_t b = c.dim("B"), s = c.dim("S");
  std::vector<int32_t> all(static_cast<size_t>(b * s));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
  return logits(run(rows_as_runs(c.values("tokens"), s), nullptr, all)).reshape({b, s, g_.vocab});
}

Tensor Model::next_token(const Tensor& tokens) {
  EntryCheck c("next_token", {{"tokens", tokens}}, g_);
  c.in_range("tokens", 0, g_.vocab, "Vocab", kNoSkip);
  const int64_t b = c.dim("B"), s = c.dim("S");
  std::vector<int32_t> last;
  for (int64_t r = 0; r < b; ++r) last.push_back(static_cast<int32_t>(r * s + s - 1));
  return logits(run(rows_as_runs(c.values("tokens"), s), nullptr, last));
}

// ---- the contiguous cache ----

Tensor Model::rows_step(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions, const Tensor* table) {
  const auto tab = table ? table->to_ints() : std::vector<int64_t>{};
  const int64_t pages = table ? table->dim(1) : g_.pages_per_row(), ps = g_.page_size;
  TokenPlan plan;
  std::vector<int32_t> select;
  for (size_t r = 0; r < ids.size(); ++r) {
    const int64_t at = positions[r];
    if (at < 0) {  // idle row: writes nothing, its logits are zero
      select.push_back(-1);
      continue;
    }
    const int64_t page = table ? tab[r * pages + at / ps] : static_cast<int64_t>(r) * pages + at / ps;
    select.push_back(static_cast<int32_t>(plan.size()));
    plan.add(static_cast<int32_t>(ids[r]), static_cast<int32_t>(at), -1, static_cast<int32_t>(r),
             static_cast<int32_t>(page * ps + at % ps));
  }
  return logits(run(plan, table, select));
}

Tensor Model::decode(const Tensor& token, int32_t pos) {
  const Tensor p = Tensor::scalar_i32(pos);
  EntryCheck c("decode", {{"token", token}, {"pos", p}}, g_);
  c.in_range("token", 0, g_.vocab, "Vocab", kNoSkip);
  c.in_range("pos", 0, g_.max_seq, "MaxSeq", kNoSkip);
  return rows_step(c.values("token"), std::vector<int64_t>(g_.batch, pos), nullptr);
}

Tensor Model::prefill(const Tensor& tokens, int32_t pos) {
  const Tensor p = Tensor::scalar_i32(pos);
  EntryCheck c("prefill", {{"tokens", tokens}, {"pos", p}}, g_);
  c.in_range("tokens", 0, g_.vocab, "Vocab", kNoSkip);
  const int64_t s = c.dim("S");
  if (pos < 0 || pos + s > g_.max_seq)
    c.fail(str("pos = ", pos, " with S = ", s, " writes positions [", pos, ", ", pos + s, "), outside [0, MaxSeq=",
               g_.max_seq, ")"));
  const auto ids = c.values("tokens");
  TokenPlan plan;
  std::vector<int32_t> select;
  for (int64_t r = 0; r < g_.batch; ++r) {
    for (int64_t i = 0; i < s; ++i) {
      const int32_t at = static_cast<int32_t>(pos + i);
      plan.add(static_cast<int32_t>(ids[r * s + i]), at, -1, static_cast<int32_t>(r),
               static_cast<int32_t>(r * g_.max_seq + at));
    }
    select.push_back(static_cast<int32_t>(r * s + s - 1));
  }
  return logits(run(plan, nullptr, select));
}

Tensor Model::decode_rows(const Tensor& tokens, const Tensor& positions) {
  EntryCheck c("decode_rows", {{"tokens", tokens}, {"positions", positions}}, g_);
  c.in_range("positions", 0, g_.max_seq, "MaxSeq", 0);
  const auto ids = c.values("tokens"), pos = c.values("positions");
  for (int64_t r = 0; r < g_.batch; ++r)
    if (pos[r] >= 0 && (ids[r] < 0 || ids[r] >= g_.vocab))
      c.fail(str(c.at("tokens", r), " = ", ids[r], " is outside [0, Vocab=", g_.vocab, ")"));
  return rows_step(ids, pos, nullptr);
}

Tensor Model::prefill_slots(const Tensor& tokens, const Tensor& slots, const Tensor& lengths) {
  EntryCheck c("prefill_slots", {{"tokens", tokens}, {"slots", slots}, {"lengths", lengths}}, g_);
  const int64_t m = c.dim("M"), s = c.dim("S");
  c.in_range("slots", 0, g_.batch, "Batch", kNoSkip);
  const auto ids = c.values("tokens"), slot = c.values("slots"), len = c.values("lengths");
  std::map<int64_t, int64_t> seen;
  for (int64_t i = 0; i < m; ++i) {
    if (auto [it, fresh] = seen.emplace(slot[i], i); !fresh)
      c.fail(str(c.at("slots", i), " = ", slot[i], " repeats ", c.at("slots", it->second), " (slots must be distinct)"));
    if (len[i] < 1 || len[i] > std::min(s, g_.max_seq))
      c.fail(str(c.at("lengths", i), " = ", len[i], " is outside [1, ", s <= g_.max_seq ? "S=" : "MaxSeq=",
                 std::min(s, g_.max_seq), "]"));
    for (int64_t j = 0; j < len[i]; ++j)
      if (ids[i * s + j] < 0 || ids[i * s + j] >= g_.vocab)
        c.fail(str(c.at("tokens", i * s + j), " = ", ids[i * s + j], " is outside [0, Vocab=", g_.vocab, ")"));
  }
  TokenPlan plan;
  std::vector<int32_t> select;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < len[i]; ++j)  // tokens past lengths[i] are padding
      plan.add(static_cast<int32_t>(ids[i * s + j]), static_cast<int32_t>(j), -1, static_cast<int32_t>(slot[i]),
               static_cast<int32_t>(slot[i] * g_.max_seq + j));
    select.push_back(static_cast<int32_t>(plan.size() - 1));
  }
  return logits(run(plan, nullptr, select));
}

// ---- packed ----

Tensor Model::hidden_packed(const Tensor& tokens, const Tensor& positions, const Tensor& segments) {
  EntryCheck c("hidden_packed", {{"tokens", tokens}, {"positions", positions}, {"segments", segments}}, g_);
  c.in_range("tokens", 0, g_.vocab, "Vocab", kNoSkip);
  c.in_range("positions", 0, std::numeric_limits<int32_t>::max(), "i32 max", kNoSkip);
  const auto start = packed_runs(c);
  const auto ids = c.values("tokens"), pos = c.values("positions");
  TokenPlan plan;
  std::vector<int32_t> select;
  for (size_t p = 0; p < ids.size(); ++p) {
    plan.add(static_cast<int32_t>(ids[p]), static_cast<int32_t>(pos[p]), start[p], -1, -1);
    select.push_back(static_cast<int32_t>(p));
  }
  Tensor h = final_hidden(run(plan, nullptr, select));
  Tensor out = be_.empty(h.shape(), g_.t);
  be_.convert(h, out);
  return be_.to_host(out);
}

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
  Tensor x = run(plan, nullptr).x;

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
  for (int64_t c0 = 0; c0 < n_scored; c0 += kChunk) {
    const int64_t c1 = std::min(n_scored, c0 + kChunk), m = c1 - c0;
    std::vector<int32_t> select, target;
    for (int64_t q = c0; q < c1; ++q) {
      select.push_back(static_cast<int32_t>(scored[q]));
      target.push_back(static_cast<int32_t>(tgt[scored[q]]));
    }
    Tensor local = shard_logits(final_hidden(x, select), DType::f32);  // CE from f32 logits
    Tensor mx = be_.empty({m}, DType::f32), se = be_.empty({m}, DType::f32), tl = be_.empty({m}, DType::f32);
    be_.logit_stats(local, g_.vocab_valid(s), g_.vocab_begin(s), upload_ints(target), mx, se, tl);
    Tensor hmx = be_.to_host(mx), hse = be_.to_host(se), htl = be_.to_host(tl);
    if (greedy) {  // the argmax across shards (lowest index on ties), as the logits say
      Tensor av = be_.empty({m}, DType::f32), ai = be_.empty({m}, DType::i32);
      be_.argmax(local, g_.vocab_valid(s), g_.vocab_begin(s), av, ai);
      Tensor hav = be_.to_host(av), hai = be_.to_host(ai);
      comm_.max_with_index(hav, hai);
      for (int64_t i = 0; i < m; ++i)
        (*greedy)[static_cast<size_t>(scored[c0 + i])] = hai.ptr<int32_t>()[i] == target[i];
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
  return out;
}

// Each shard offers its best top_n logits per row (value, global index); the offers are
// gathered and merged alike on every rank.
void Model::top_tokens(const Tensor& local, int64_t top_n, const Tensor& global_max, const Tensor& sumexp,
                       const std::vector<int64_t>& scored, int64_t c0, TopTokens& top) {
  const int64_t m = local.dim(0), width = local.dim(1), s = comm_.rank();
  const int64_t valid = g_.vocab_valid(s), offset = g_.vocab_begin(s);
  const Tensor host = be_.to_host(local);
  const float* lg = host.ptr<float>();
  auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  Tensor offer_v = Tensor::from_floats({m * top_n}, std::vector<float>(static_cast<size_t>(m * top_n), -INFINITY));
  Tensor offer_i = Tensor::from_ints({m * top_n}, std::vector<int64_t>(static_cast<size_t>(m * top_n), -1), DType::i32);
  std::vector<std::pair<float, int32_t>> row(static_cast<size_t>(valid));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t k = 0; k < valid; ++k) row[k] = {lg[i * width + k], static_cast<int32_t>(offset + k)};
    const int64_t take = std::min(top_n, valid);
    std::partial_sort(row.begin(), row.begin() + take, row.end(), better);
    for (int64_t k = 0; k < take; ++k) {
      offer_v.ptr<float>()[i * top_n + k] = row[k].first;
      offer_i.ptr<int32_t>()[i * top_n + k] = row[k].second;
    }
  }
  Tensor all_v = Tensor::empty({g_.shards, m * top_n}, DType::f32), all_i = Tensor::empty({g_.shards, m * top_n}, DType::i32);
  comm_.all_gather(offer_v, all_v);
  comm_.all_gather(offer_i, all_i);
  for (int64_t i = 0; i < m; ++i) {
    std::vector<std::pair<float, int32_t>> cand;
    for (int64_t sh = 0; sh < g_.shards; ++sh)
      for (int64_t k = 0; k < top_n; ++k) {
        const int64_t at = sh * m * top_n + i * top_n + k;
        if (all_i.ptr<int32_t>()[at] >= 0) cand.push_back({all_v.ptr<float>()[at], all_i.ptr<int32_t>()[at]});
      }
    std::sort(cand.begin(), cand.end(), better);
    const size_t p = static_cast<size_t>(scored[c0 + i]);
    for (size_t k = 0; k < cand.size() && static_cast<int64_t>(k) < top_n; ++k) {
      top.ids[p * top.n + k] = cand[k].second;
      top.logprobs[p * top.n + k] = cand[k].first - global_max.ptr<float>()[i] - std::log(sumexp.ptr<float>()[i]);
    }
  }
}

Tensor Model::log_probs_packed(const Tensor& tokens, const Tensor& positions, const Tensor& segments,
                               const Tensor& targets) {
  return packed_log_probs(
      "log_probs_packed",
      {{"tokens", tokens}, {"positions", positions}, {"segments", segments}, {"targets", targets}}, nullptr);
}

float Model::loss_packed(const Tensor& tokens, const Tensor& positions, const Tensor& segments, const Tensor& targets,
                         const Tensor& weights) {
  Tensor lp = packed_log_probs("loss_packed",
                               {{"tokens", tokens}, {"positions", positions}, {"segments", segments},
                                {"targets", targets}, {"weights", weights}},
                               &weights);
  const auto v = lp.to_floats(), w = weights.to_floats();
  double num = 0, den = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (w[i] == 0) continue;
    num += static_cast<double>(w[i]) * -v[i];
    den += w[i];
  }
  return den == 0 ? 0.0f : static_cast<float>(num / den);
}

}  // namespace linnet
