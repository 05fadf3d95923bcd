// The entries that write the KV cache from packed or paged inputs, and the generation loops.
#include <cmath>
#include <algorithm>
#include <limits>
#include <set>

#include "layers/model.h"

namespace linnet {

namespace {

constexpr int64_t kNoSkip = std::numeric_limits<int64_t>::min();

// Shared by the packed and paged entries that write the cache: no two tokens of a call may
// write the same slot (docs/entries.md "The entries").
class SlotWrites {
 public:
  explicit SlotWrites(const EntryCheck& c) : c_(c) {}
  void add(int64_t slot, const std::string& who) {
    auto [it, fresh] = seen_.emplace(slot, who);
    if (!fresh) c_.fail(str(who, " and ", it->second, " both write cache slot ", slot));
  }

 private:
  const EntryCheck& c_;
  std::map<int64_t, std::string> seen_;
};

// Table rows' pages 0 … position/PageSize must be pages of the pool.
void check_pages(const EntryCheck& c, const std::vector<int64_t>& table, int64_t pages, int64_t row, int64_t position,
                 int64_t page_size, int64_t num_pages, const std::string& who) {
  const int64_t last_page = position / page_size;
  if (last_page >= pages)
    c.fail(str(who, " at position ", position, " needs page ", last_page, " of table row ", row,
               ", but the table has Pages=", pages));
  for (int64_t j = 0; j <= last_page; ++j) {
    const int64_t page = table[row * pages + j];
    if (page < 0 || page >= num_pages)
      c.fail(str(c.at("table", row * pages + j), " = ", page, " is outside [0, NumPages=", num_pages, ")"));
  }
}

}  // namespace

// ---- packed prefill into the contiguous cache ----

Tensor Model::prefill_packed(const Tensor& tokens, const Tensor& rows, const Tensor& positions, const Tensor& segments,
                             const Tensor& last) {
  return step_packed(tokens, rows, positions, segments, last, Tensor(), Tensor());
}

Tensor Model::step_packed(const Tensor& tokens, const Tensor& rows, const Tensor& positions, const Tensor& segments,
                          const Tensor& last, const Tensor& step_tokens, const Tensor& step_positions) {
  const bool stepping = step_tokens.defined();
  EntryArgs args = {{"tokens", tokens}, {"rows", rows}, {"positions", positions}, {"segments", segments}, {"last", last}};
  if (stepping) {
    args["step_tokens"] = step_tokens;
    args["step_positions"] = step_positions;
  }
  EntryCheck c(stepping ? "step_packed" : "prefill_packed", args, g_);
  c.in_range("tokens", 0, g_.vocab, "Vocab", kNoSkip);
  c.in_range("rows", 0, g_.batch, "Batch", kNoSkip);
  c.in_range("positions", 0, g_.max_seq, "MaxSeq", kNoSkip);
  const int64_t p_count = c.dim("P");
  c.in_range("last", 0, p_count, "P", 0);
  const auto start = packed_runs(c);
  const auto ids = c.values("tokens"), row = c.values("rows"), pos = c.values("positions"), lst = c.values("last");
  SlotWrites writes(c);
  TokenPlan plan;
  for (int64_t p = 0; p < p_count; ++p) {
    const int64_t slot = row[p] * g_.max_seq + pos[p];
    writes.add(slot, str("tokens[", p, "] (row ", row[p], ", position ", pos[p], ")"));
    plan.add(static_cast<int32_t>(ids[p]), static_cast<int32_t>(pos[p]), start[p], -1, static_cast<int32_t>(slot),
             static_cast<int32_t>(row[p]));  // a packed run written into its row: the row's state too
  }
  std::vector<int32_t> select;
  for (int64_t b = 0; b < g_.batch; ++b) select.push_back(static_cast<int32_t>(lst[b] < 0 ? -1 : lst[b]));
  if (stepping) {
    c.in_range("step_positions", 0, g_.max_seq, "MaxSeq", 0);
    const auto st = c.values("step_tokens"), sp = c.values("step_positions");
    for (int64_t b = 0; b < g_.batch; ++b) {
      if (sp[b] < 0) {
        select.push_back(-1);
        continue;
      }
      if (st[b] < 0 || st[b] >= g_.vocab)
        c.fail(str(c.at("step_tokens", b), " = ", st[b], " is outside [0, Vocab=", g_.vocab, ")"));
      const int64_t slot = b * g_.max_seq + sp[b];
      writes.add(slot, str("step_tokens[", b, "] (row ", b, ", position ", sp[b], ")"));
      select.push_back(static_cast<int32_t>(plan.size()));
      plan.add(static_cast<int32_t>(st[b]), static_cast<int32_t>(sp[b]), -1, static_cast<int32_t>(b),
               static_cast<int32_t>(slot));
    }
  }
  return net_.logits(net_.run(plan, nullptr, select));
}

// ---- paged ----

Tensor Model::decode_paged(const Tensor& tokens, const Tensor& positions, const Tensor& table) {
  EntryCheck c("decode_paged", {{"tokens", tokens}, {"positions", positions}, {"table", table}}, g_);
  c.in_range("positions", 0, g_.max_seq, "MaxSeq", 0);
  const int64_t rows = c.dim("Rows"), pages = c.dim("Pages");
  const auto ids = c.values("tokens"), pos = c.values("positions"), tab = c.values("table");
  SlotWrites writes(c);
  for (int64_t r = 0; r < rows; ++r) {
    if (pos[r] < 0) continue;
    if (ids[r] < 0 || ids[r] >= g_.vocab)
      c.fail(str(c.at("tokens", r), " = ", ids[r], " is outside [0, Vocab=", g_.vocab, ")"));
    check_pages(c, tab, pages, r, pos[r], g_.page_size, g_.num_pages(), str("tokens[", r, "]"));
    writes.add(tab[r * pages + pos[r] / g_.page_size] * g_.page_size + pos[r] % g_.page_size, str("tokens[", r, "]"));
  }
  return rows_step(ids, pos, &table);
}

Tensor Model::prefill_paged(const Tensor& tokens, const Tensor& positions, const Tensor& rows, const Tensor& slots,
                            const Tensor& last, const Tensor& table) {
  return step_paged(tokens, positions, rows, slots, last, Tensor(), Tensor(), table);
}

Tensor Model::step_paged(const Tensor& tokens, const Tensor& positions, const Tensor& rows, const Tensor& slots,
                         const Tensor& last, const Tensor& step_tokens, const Tensor& step_positions,
                         const Tensor& table) {
  TokenPlan plan;
  std::vector<int32_t> select;
  plan_step_paged(tokens, positions, rows, slots, last, step_tokens, step_positions, table, plan, select);
  return net_.logits(net_.run(plan, &table, select));
}

void Model::plan_step_paged(const Tensor& tokens, const Tensor& positions, const Tensor& rows, const Tensor& slots,
                            const Tensor& last, const Tensor& step_tokens, const Tensor& step_positions,
                            const Tensor& table, TokenPlan& plan, std::vector<int32_t>& select) {
  const bool stepping = step_tokens.defined();
  EntryArgs args = {{"tokens", tokens}, {"positions", positions}, {"rows", rows},
                    {"slots", slots},   {"last", last},           {"table", table}};
  if (stepping) {
    args["step_tokens"] = step_tokens;
    args["step_positions"] = step_positions;
  }
  EntryCheck c(stepping ? "step_paged" : "prefill_paged", args, g_);
  const int64_t p_count = c.dim("P"), n_rows = c.dim("Rows"), pages = c.dim("Pages"), ps = g_.page_size;
  c.in_range("tokens", 0, g_.vocab, "Vocab", kNoSkip);
  c.in_range("positions", 0, g_.max_seq, "MaxSeq", kNoSkip);
  c.in_range("rows", 0, n_rows, "Rows", kNoSkip);
  c.in_range("last", 0, p_count, "P", 0);
  const auto ids = c.values("tokens"), pos = c.values("positions"), row = c.values("rows"), slot = c.values("slots"),
             lst = c.values("last"), tab = c.values("table");
  SlotWrites writes(c);
  for (int64_t p = 0; p < p_count; ++p) {
    const std::string who = str("tokens[", p, "]");
    check_pages(c, tab, pages, row[p], pos[p], ps, g_.num_pages(), who);
    const int64_t page = tab[row[p] * pages + pos[p] / ps], expected = page * ps + pos[p] % ps;
    if (slot[p] != expected)
      c.fail(str(c.at("slots", p), " = ", slot[p], " disagrees with table[", row[p], ", ", pos[p] / ps, "] = ", page,
                 " (position ", pos[p], " of row ", row[p], " is slot ", expected, ")"));
    writes.add(slot[p], who);
    plan.add(static_cast<int32_t>(ids[p]), static_cast<int32_t>(pos[p]), -1, static_cast<int32_t>(row[p]),
             static_cast<int32_t>(slot[p]));
  }
  for (int64_t r = 0; r < n_rows; ++r) select.push_back(static_cast<int32_t>(lst[r] < 0 ? -1 : lst[r]));
  if (stepping) {
    c.in_range("step_positions", 0, g_.max_seq, "MaxSeq", 0);
    const auto st = c.values("step_tokens"), sp = c.values("step_positions");
    for (int64_t r = 0; r < n_rows; ++r) {
      if (sp[r] < 0) {
        select.push_back(-1);
        continue;
      }
      const std::string who = str("step_tokens[", r, "]");
      if (st[r] < 0 || st[r] >= g_.vocab) c.fail(str(c.at("step_tokens", r), " = ", st[r], " is outside [0, Vocab=", g_.vocab, ")"));
      check_pages(c, tab, pages, r, sp[r], ps, g_.num_pages(), who);
      const int64_t s = tab[r * pages + sp[r] / ps] * ps + sp[r] % ps;
      writes.add(s, who);
      select.push_back(static_cast<int32_t>(plan.size()));
      plan.add(static_cast<int32_t>(st[r]), static_cast<int32_t>(sp[r]), -1, static_cast<int32_t>(r),
               static_cast<int32_t>(s));
    }
  }
}


// ---- generation ----

Tensor Model::stepping(const Tensor& token, int32_t pos, int64_t steps, float temperature, uint64_t key0,
                       uint64_t key1, std::optional<int32_t> eos, int32_t* steps_taken) {
  std::vector<int64_t> cur = token.to_ints();
  std::vector<bool> done(static_cast<size_t>(g_.batch), false);
  Tensor out = Tensor::from_ints({g_.batch, steps}, std::vector<int64_t>(g_.batch * steps, eos.value_or(0)));
  int32_t* o = out.ptr<int32_t>();
  int32_t taken = 0;
  for (int64_t i = 0; i < steps; ++i) {
    TokenPlan plan;
    std::vector<int32_t> select;
    std::vector<int64_t> active;
    const int32_t at = static_cast<int32_t>(pos + i);
    for (int64_t b = 0; b < g_.batch; ++b) {
      if (done[b]) continue;  // a row past its eos is idle: nothing written, nothing chosen
      select.push_back(static_cast<int32_t>(plan.size()));
      active.push_back(b);
      plan.add(static_cast<int32_t>(cur[b]), at, -1, static_cast<int32_t>(b), static_cast<int32_t>(b * g_.max_seq + at));
    }
    // Sampling never has idle rows, so row k of the choice is batch row b (Philox's counter).
    const Hidden h = net_.run(plan, nullptr, select);
    std::vector<int32_t> next(select.size());
    if (net_.runs_head()) next = sampler_.choose(local_logits(h), temperature, key0, key1, static_cast<int32_t>(i));
    net_.from_head(next);  // (pipeline stages: the last stage's choice, on every stage)
    for (size_t k = 0; k < active.size(); ++k) {
      const int64_t b = active[k];
      o[b * steps + i] = next[k];
      cur[b] = next[k];
      if (eos && next[k] == *eos) done[b] = true;
    }
    taken = static_cast<int32_t>(i + 1);
    if (eos && std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
  }
  if (steps_taken) *steps_taken = taken;
  return out;
}

Tensor Model::generate(const Tensor& token, int32_t pos, int64_t steps) {
  const Tensor p = Tensor::scalar_i32(pos);
  EntryCheck c("generate", {{"token", token}, {"pos", p}}, g_, {{"Steps", steps}});
  c.in_range("token", 0, g_.vocab, "Vocab", kNoSkip);
  if (pos < 0 || pos + steps > g_.max_seq)
    c.fail(str("pos = ", pos, " with Steps = ", steps, " writes positions [", pos, ", ", pos + steps,
               "), outside [0, MaxSeq=", g_.max_seq, ")"));
  return stepping(token, pos, steps, 0.0f, 0, 0, std::nullopt, nullptr);
}

Tensor Model::sample(const Tensor& token, int32_t pos, const Tensor& key, float temperature, int64_t steps) {
  const Tensor p = Tensor::scalar_i32(pos), t = Tensor::scalar_f32(temperature);
  EntryCheck c("sample", {{"token", token}, {"pos", p}, {"key", key}, {"temperature", t}}, g_, {{"Steps", steps}});
  c.in_range("token", 0, g_.vocab, "Vocab", kNoSkip);
  if (std::isnan(temperature) || temperature < 0)
    c.fail(str("temperature = ", temperature, " must be a number ≥ 0 (0 is greedy)"));
  if (pos < 0 || pos + steps > g_.max_seq)
    c.fail(str("pos = ", pos, " with Steps = ", steps, " writes positions [", pos, ", ", pos + steps,
               "), outside [0, MaxSeq=", g_.max_seq, ")"));
  const auto k = key.to_ints();
  return stepping(token, pos, steps, temperature, static_cast<uint64_t>(k[0]), static_cast<uint64_t>(k[1]),
                  std::nullopt, nullptr);
}

std::pair<Tensor, int32_t> Model::generate_until(const Tensor& token, int32_t pos, int32_t eos, int64_t max_new) {
  const Tensor p = Tensor::scalar_i32(pos), e = Tensor::scalar_i32(eos);
  EntryCheck c("generate_until", {{"token", token}, {"pos", p}, {"eos", e}}, g_, {{"MaxNew", max_new}});
  c.in_range("token", 0, g_.vocab, "Vocab", kNoSkip);
  c.in_range("eos", 0, g_.vocab, "Vocab", kNoSkip);
  if (pos < 0 || pos + max_new > g_.max_seq)
    c.fail(str("pos = ", pos, " with MaxNew = ", max_new, " writes positions [", pos, ", ", pos + max_new,
               "), outside [0, MaxSeq=", g_.max_seq, ")"));
  int32_t n = 0;
  Tensor out = stepping(token, pos, max_new, 0.0f, 0, 0, eos, &n);
  return {out, n};
}

}  // namespace linnet
