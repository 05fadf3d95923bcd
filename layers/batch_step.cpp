// The batch engine's step (docs/entries.md "The batch engine"): one plan the engine built from
// its pages, every token run and its K/V written, each sampling row's next token chosen next to
// the logits by the one sampler.
#include <algorithm>

#include "layers/model.h"

namespace linnet {

std::vector<int32_t> Model::run_batch(const BatchPlan& plan) {
  const size_t rows = static_cast<size_t>(plan.rows);
  LINNET_CHECK(plan.table.size() == rows * static_cast<size_t>(plan.pages) && plan.sample.size() == rows &&
                   plan.choices.size() == rows,
               "run_batch: a plan of ", rows, " rows with ", plan.table.size(), " table entries, ", plan.sample.size(),
               " samples and ", plan.choices.size(), " choices");
  const Tensor table = Tensor::from_ints({plan.rows, plan.pages}, {plan.table.begin(), plan.table.end()});
  for (size_t r = 0; r < rows; ++r)
    LINNET_CHECK(plan.sample[r] < 0 || static_cast<size_t>(plan.sample[r]) < plan.tokens.size(), "run_batch: row ", r,
                 " samples token ", plan.sample[r], " of ", plan.tokens.size());
  std::vector<int32_t> out(rows, -1);
  // Pipeline stages: the step's rows in micro-batches that follow each other through the
  // stages, so that while a later stage runs one the earlier ones run the next (docs/parallel.md).
  // Each row's tokens stay in one micro-batch; the results are each row's own (every entry is
  // batch invariant), the same bits as one micro-batch.
  const std::vector<std::vector<int32_t>> groups = micro_batches(plan);
  std::vector<int32_t> chosen_all;  // the sampling rows' choices, micro-batch after micro-batch
  std::vector<size_t> chosen_row;
  for (const std::vector<int32_t>& group : groups) {
    const TokenPlan part = groups.size() == 1 ? plan.tokens : plan.tokens.rows_of(group);
    // Only the rows that produce a token go through the lm_head.
    std::vector<int32_t> used;
    std::vector<RowChoice> used_choices;
    for (size_t r = 0; r < rows; ++r) {
      if (plan.sample[r] < 0) continue;
      if (groups.size() > 1 && !std::binary_search(group.begin(), group.end(), static_cast<int32_t>(r))) continue;
      used.push_back(groups.size() == 1 ? plan.sample[r] : part.index_of(plan.sample[r]));
      used_choices.push_back(plan.choices[r]);
      chosen_row.push_back(r);
    }
    if (used.empty()) {
      net_.run(part, &table);  // K/V still written
      continue;
    }
    const Hidden h = net_.run(part, &table, used);
    std::vector<int32_t> chosen(used.size());
    if (net_.runs_head()) chosen = sampler_.choose_rows(local_logits(h), used_choices);
    chosen_all.insert(chosen_all.end(), chosen.begin(), chosen.end());
  }
  net_.from_head(chosen_all);  // (pipeline stages: the last stage's choices, on every stage)
  for (size_t k = 0; k < chosen_row.size(); ++k) out[chosen_row[k]] = chosen_all[k];
  return out;
}

// One group of every row without stages; with P stages, up to P groups of consecutive rows
// (those with tokens, in row order), as even as the rows allow. A plan of packed runs stays whole.
std::vector<std::vector<int32_t>> Model::micro_batches(const BatchPlan& plan) const {
  std::vector<int32_t> rows_with_tokens;
  bool packed = false;
  for (size_t i = 0; i < plan.tokens.size(); ++i) {
    packed |= plan.tokens.run_start[i] >= 0 || plan.tokens.cache_row[i] < 0;
    const int32_t r = plan.tokens.cache_row[i];
    if (r >= 0 && std::find(rows_with_tokens.begin(), rows_with_tokens.end(), r) == rows_with_tokens.end())
      rows_with_tokens.push_back(r);
  }
  std::sort(rows_with_tokens.begin(), rows_with_tokens.end());
  const int64_t n = static_cast<int64_t>(rows_with_tokens.size());
  const int64_t m = std::min<int64_t>(net_.stages(), n);
  if (m <= 1 || packed) return {{}};
  std::vector<std::vector<int32_t>> groups(static_cast<size_t>(m));
  for (int64_t k = 0; k < n; ++k) groups[static_cast<size_t>(k * m / n)].push_back(rows_with_tokens[static_cast<size_t>(k)]);
  return groups;
}

}  // namespace linnet
