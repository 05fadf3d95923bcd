#include "engine/generator.h"

#include <algorithm>

#include "layers/model.h"

namespace linnet::engine {

Generator::Generator(Model& model, SchedulerLimits limits, std::vector<int32_t> eos)
    : model_(model),
      pages_(model.generics().num_pages(), model.generics().page_size),
      scheduler_(pages_, [&] {
        limits.max_seq = model.generics().max_seq;
        return limits;
      }()),
      eos_(std::move(eos)) {}

Generator::~Generator() = default;

std::string Generator::submit(Request r) { return scheduler_.submit(std::move(r)); }

namespace {
Tensor ints(Shape s, const std::vector<int64_t>& v) { return Tensor::from_ints(std::move(s), v, DType::i32); }
}  // namespace

std::vector<Completion> Generator::step(const StopCheck& stop) {
  const std::vector<StepRow> rows = scheduler_.schedule();
  if (rows.empty()) return {};
  const int64_t n_rows = static_cast<int64_t>(rows.size()), ps = pages_.page_size();
  // A row with one token left to feed decodes (the step half); chunks of prompts prefill.
  // With no chunk at all, every row goes through the prefill half alone.
  auto decodes = [](const StepRow& r) { return r.count == 1 && r.sample; };
  const bool any_chunk = std::any_of(rows.begin(), rows.end(), [&](const StepRow& r) { return !decodes(r); });
  int64_t pages = 1;
  for (const auto& r : rows) pages = std::max<int64_t>(pages, static_cast<int64_t>(r.seq->pages.size()));
  std::vector<int64_t> table(static_cast<size_t>(n_rows * pages), -1);
  std::vector<int64_t> tok, pos, row, slot, last(static_cast<size_t>(n_rows), -1);
  std::vector<int64_t> step_tok(static_cast<size_t>(n_rows), 0), step_pos(static_cast<size_t>(n_rows), -1);
  std::vector<RowChoice> choices(static_cast<size_t>(any_chunk ? 2 * n_rows : n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    const StepRow& sr = rows[static_cast<size_t>(r)];
    const Sequence& s = *sr.seq;
    std::copy(s.pages.begin(), s.pages.end(), table.begin() + r * pages);
    const SamplingParams& p = s.request.params;
    const RowChoice choice{p.temperature, p.top_k, p.top_p, p.seed, 0, static_cast<int32_t>(s.generated())};
    if (any_chunk && decodes(sr)) {
      step_tok[r] = s.tokens[static_cast<size_t>(sr.begin)];
      step_pos[r] = sr.begin;
      choices[static_cast<size_t>(n_rows + r)] = choice;
      continue;
    }
    for (int64_t i = sr.begin; i < sr.begin + sr.count; ++i) {
      tok.push_back(s.tokens[static_cast<size_t>(i)]);
      pos.push_back(i);
      row.push_back(r);
      slot.push_back(s.pages[static_cast<size_t>(i / ps)] * ps + i % ps);
    }
    if (sr.sample) last[r] = static_cast<int64_t>(tok.size()) - 1;
    choices[static_cast<size_t>(r)] = choice;
  }
  const int64_t p_count = static_cast<int64_t>(tok.size());
  const Tensor t_table = ints({n_rows, pages}, table);
  std::vector<int32_t> out =
      any_chunk ? model_.step_paged_choose(ints({p_count}, tok), ints({p_count}, pos), ints({p_count}, row),
                                           ints({p_count}, slot), ints({n_rows}, last), ints({n_rows, 1}, step_tok),
                                           ints({n_rows}, step_pos), t_table, choices)
                : model_.step_paged_choose(ints({p_count}, tok), ints({p_count}, pos), ints({p_count}, row),
                                           ints({p_count}, slot), ints({n_rows}, last), Tensor(), Tensor(), t_table,
                                           choices);
  std::vector<int32_t> chosen(static_cast<size_t>(n_rows), -1);
  for (int64_t r = 0; r < n_rows; ++r) {
    const StepRow& sr = rows[static_cast<size_t>(r)];
    if (sr.sample) chosen[r] = out[static_cast<size_t>(any_chunk && decodes(sr) ? n_rows + r : r)];
    if (decodes(sr)) continue;
    stats_.prefill_tokens += sr.count;
  }
  stats_.peak_pages = std::max(stats_.peak_pages, pages_.used_pages());
  std::vector<Completion> done = scheduler_.complete(rows, chosen, eos_, stop);
  ++stats_.steps;
  for (const auto& sr : rows) stats_.generated_tokens += sr.sample ? 1 : 0;
  stats_.preemptions = scheduler_.preemptions();
  return done;
}

}  // namespace linnet::engine
