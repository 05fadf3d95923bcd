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
  return net_.logits(net_.run(rows_as_runs(c.values("tokens"), s), nullptr, all)).reshape({b, s, g_.vocab});
}

Tensor Model::next_token(const Tensor& tokens) {
  EntryCheck c("next_token", {{"tokens", tokens}}, g_);
  c.in_range("tokens", 0, g_.vocab, "Vocab", kNoSkip);
  const int64_t b = c.dim("B"), s = c.dim("S");
  std::vector<int32_t> last;
  for (int64_t r = 0; r < b; ++r) last.push_back(static_cast<int32_t>(r * s + s - 1));
  return net_.logits(net_.run(rows_as_runs(c.values("tokens"), s), nullptr, last));
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
  return net_.logits(net_.run(plan, table, select));
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
  return net_.logits(net_.run(plan, nullptr, select));
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
  return net_.logits(net_.run(plan, nullptr, select));
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
  const Hidden hidden = net_.run(plan, nullptr, select);
  Tensor host = Tensor::empty({static_cast<int64_t>(select.size()), g_.hidden}, g_.t);
  if (net_.runs_head()) {
    Tensor h = net_.final_hidden(hidden);
    Tensor out = be_.empty(h.shape(), g_.t);
    be_.convert(h, out);
    host = be_.to_host(out);
  }
  net_.from_head(host);  // (pipeline stages: the last stage's, on every stage)
  return host;
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
