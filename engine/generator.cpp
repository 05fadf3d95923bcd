#include "engine/generator.h"

#include <algorithm>

#include "core/backend.h"
#include "layers/model.h"

namespace linnet::engine {

Generator::Generator(Model& model, SchedulerLimits limits, std::vector<int32_t> eos)
    : model_(model),
      pages_(limits.max_pages > 0 ? std::min(limits.max_pages, model.generics().num_pages()) : model.generics().num_pages(),
             model.generics().page_size),
      scheduler_(pages_, [&] {
        limits.max_seq = model.generics().max_seq;
        limits.whole_prompts = limits.whole_prompts || model.rope_follows_length();
        limits.recompute_at = model.config().recompute_cache_at;
        if (model.config().any_linear()) {
          limits.state_slots = model.generics().batch;  // a state row each
          limits.state_snapshots = model.generics().state_snapshots;
          limits.state_chunk = kDeltaRuleChunk;  // prompts cut where the delta rule's chunks end
        }
        LINNET_CHECK(limits.recompute_at == 0 || limits.whole_prompts, "a recomputed sequence runs whole");
        return limits;
      }()),
      eos_(std::move(eos)) {}

Generator::~Generator() = default;

std::vector<int32_t> banned_ids(const Sequence& s, const std::vector<int32_t>& eos) {
  const SamplingParams& p = s.request.params;
  std::vector<int32_t> out;
  // transformers' NoBadWordsLogitsProcessor: a word's last id, where the ids before it end the
  // sequence so far (prompt and output alike).
  for (const auto& w : p.bad_words) {
    const size_t before = w.size() - 1;
    if (before <= s.tokens.size() && std::equal(w.begin(), w.end() - 1, s.tokens.end() - static_cast<std::ptrdiff_t>(before)))
      out.push_back(w.back());
  }
  // min_tokens (transformers' MinNewTokensLengthLogitsProcessor, vLLM's min_tokens): no EOS and
  // no stop id before it.
  if (s.generated() < p.min_tokens) {
    if (!p.ignore_eos) out.insert(out.end(), eos.begin(), eos.end());
    out.insert(out.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string Generator::submit(Request r) { return scheduler_.submit(std::move(r)); }

std::vector<Completion> Generator::step(const StopCheck& stop) {
  const std::vector<StepRow> rows = scheduler_.schedule();
  if (rows.empty()) return {};
  const int64_t n_rows = static_cast<int64_t>(rows.size()), ps = pages_.page_size();
  // The step as the model runs it, built once: each row's tokens (a prefill chunk, or the
  // one token a decoding row feeds) attend over its own pages; a sampling row's last token
  // chooses its next.
  BatchPlan plan;
  plan.rows = n_rows;
  for (const auto& r : rows) plan.pages = std::max<int64_t>(plan.pages, static_cast<int64_t>(r.seq->pages.size()));
  plan.pages = std::max<int64_t>(plan.pages, 1);
  plan.table.assign(static_cast<size_t>(n_rows * plan.pages), -1);
  plan.sample.assign(static_cast<size_t>(n_rows), -1);
  plan.choices.resize(static_cast<size_t>(n_rows));
  std::vector<std::vector<int32_t>> banned(static_cast<size_t>(n_rows));  // the choices' views point here
  for (int64_t r = 0; r < n_rows; ++r) {
    const StepRow& sr = rows[static_cast<size_t>(r)];
    const Sequence& s = *sr.seq;
    std::copy(s.pages.begin(), s.pages.end(), plan.table.begin() + r * plan.pages);
    // A shared prefix's state from its snapshot; this chunk's deepest page boundary kept.
    if (sr.restore >= 0) plan.tokens.state_restores.push_back({sr.restore, s.state_slot, static_cast<int32_t>(sr.begin)});
    for (const StepRow::Keep& k : sr.keeps) {
      plan.tokens.state_keep.resize(plan.tokens.size() + static_cast<size_t>(sr.count), -1);
      plan.tokens.state_keep[plan.tokens.size() + static_cast<size_t>(k.at - 1 - sr.begin)] = k.snapshot;
    }
    for (int64_t i = sr.begin; i < sr.begin + sr.count; ++i)
      plan.tokens.add(s.tokens[static_cast<size_t>(i)], static_cast<int32_t>(i), -1, static_cast<int32_t>(r),
                      static_cast<int32_t>(s.pages[static_cast<size_t>(i / ps)] * ps + i % ps),
                      s.state_slot >= 0 ? s.state_slot : static_cast<int32_t>(r));  // its state's slot
    if (!sr.sample) continue;
    const SamplingParams& p = s.request.params;
    plan.sample[static_cast<size_t>(r)] = static_cast<int32_t>(plan.tokens.size()) - 1;
    RowChoice& c = plan.choices[static_cast<size_t>(r)];
    c.temperature = p.temperature;
    c.top_k = p.top_k;
    c.top_p = p.top_p;
    c.min_p = p.min_p;
    c.key0 = p.seed;
    c.step = static_cast<int32_t>(s.generated());
    LogitProcessors& lp = c.processors;
    lp.bias = p.logit_bias;
    lp.repetition_penalty = p.repetition_penalty;
    lp.seen = s.seen;
    lp.presence_penalty = p.presence_penalty;
    lp.frequency_penalty = p.frequency_penalty;
    lp.counts = s.counts;
    banned[static_cast<size_t>(r)] = banned_ids(s, eos_);
    lp.banned = banned[static_cast<size_t>(r)];
  }
  if (!plan.tokens.state_keep.empty()) plan.tokens.state_keep.resize(plan.tokens.size(), -1);
  const std::vector<int32_t> chosen = model_.run_batch(plan);
  for (const StepRow& sr : rows) stats_.restored_tokens += sr.restore >= 0 ? sr.begin : 0;
  for (const StepRow& sr : rows)
    if (!(sr.count == 1 && sr.sample)) stats_.prefill_tokens += sr.count;  // a decoding row feeds one token
  stats_.peak_pages = std::max(stats_.peak_pages, pages_.used_pages());
  std::vector<Completion> done = scheduler_.complete(rows, chosen, eos_, stop);
  ++stats_.steps;
  for (const auto& sr : rows) stats_.generated_tokens += sr.sample ? 1 : 0;
  stats_.preemptions = scheduler_.preemptions();
  return done;
}

}  // namespace linnet::engine
