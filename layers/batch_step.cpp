// The batch engine's step (docs/entries.md "The batch engine"): one plan the engine built from
// its pages, every token run and its K/V written, each sampling row's next token chosen next to
// the logits by the one sampler.
#include "layers/model.h"

namespace linnet {

std::vector<int32_t> Model::run_batch(const BatchPlan& plan) {
  const size_t rows = static_cast<size_t>(plan.rows);
  LINNET_CHECK(plan.table.size() == rows * static_cast<size_t>(plan.pages) && plan.sample.size() == rows &&
                   plan.choices.size() == rows,
               "run_batch: a plan of ", rows, " rows with ", plan.table.size(), " table entries, ", plan.sample.size(),
               " samples and ", plan.choices.size(), " choices");
  const Tensor table = Tensor::from_ints({plan.rows, plan.pages}, {plan.table.begin(), plan.table.end()});
  // Only the rows that produce a token go through the lm_head.
  std::vector<int32_t> used, where(rows, -1);
  std::vector<RowChoice> used_choices;
  for (size_t r = 0; r < rows; ++r) {
    if (plan.sample[r] < 0) continue;
    LINNET_CHECK(static_cast<size_t>(plan.sample[r]) < plan.tokens.size(), "run_batch: row ", r, " samples token ",
                 plan.sample[r], " of ", plan.tokens.size());
    where[r] = static_cast<int32_t>(used.size());
    used.push_back(plan.sample[r]);
    used_choices.push_back(plan.choices[r]);
  }
  std::vector<int32_t> out(rows, -1);
  if (used.empty()) {
    net_.run(plan.tokens, &table);  // K/V still written
    return out;
  }
  const Hidden h = net_.run(plan.tokens, &table, used);
  std::vector<int32_t> chosen(used.size());
  if (net_.runs_head()) chosen = sampler_.choose_rows(local_logits(h), used_choices);
  net_.from_head(chosen);  // (pipeline stages: the last stage's choice, on every stage)
  for (size_t r = 0; r < rows; ++r)
    if (where[r] >= 0) out[r] = chosen[static_cast<size_t>(where[r])];
  return out;
}

}  // namespace linnet
