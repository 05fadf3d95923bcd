#include "engine/scheduler.h"

#include "engine/request_rules.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "layers/logit_processors.h"

namespace linnet::engine {

Scheduler::Scheduler(PageAllocator& pages, SchedulerLimits limits) : pages_(pages), limits_(limits) {
  LINNET_CHECK(limits_.max_seq > 0 && limits_.max_rows > 0 && limits_.token_budget > 0, "scheduler limits");
  if (limits_.state_slots > 0) limits_.max_rows = std::min(limits_.max_rows, limits_.state_slots);
  for (int64_t k = limits_.state_slots; k-- > 0;) free_slots_.push_back(static_cast<int32_t>(k));  // slot 0 first
  if (limits_.state_slots > 0) snapshots_.resize(static_cast<size_t>(limits_.state_snapshots));
}

size_t Scheduler::free_snapshots() const {
  return static_cast<size_t>(std::count_if(snapshots_.begin(), snapshots_.end(), [](const Snapshot& k) { return k.page == kFree; }));
}

int32_t Scheduler::snapshot_at(int32_t page) const {
  for (size_t k = 0; k < snapshots_.size(); ++k)
    if (snapshots_[k].page == page) return static_cast<int32_t>(k);
  return -1;
}

void Scheduler::let_go(int32_t page) {
  pages_.release(page);
  if (pages_.refs(page) > 0) return;
  if (const int32_t k = snapshot_at(page); k >= 0) snapshots_[static_cast<size_t>(k)].page = kFree;
}

int32_t Scheduler::published_page(const std::vector<int32_t>& tokens, int64_t end) const {
  int32_t page = -1;
  for (int64_t j = 0; j < end / pages_.page_size() && (j == 0 || page >= 0); ++j) page = pages_.find(tokens, j, page);
  return page;
}

int64_t Scheduler::snapshot_every() const {
  const int64_t ps = pages_.page_size();
  return limits_.state_chunk > 0 ? std::lcm(ps, limits_.state_chunk) : ps;
}

int64_t Scheduler::piece(const Sequence& s, int64_t budget) const {
  const int64_t rest = static_cast<int64_t>(s.tokens.size()) - s.computed;
  if (limits_.whole_prompts) return rest;
  if (rest <= budget || limits_.state_chunk <= 0) return std::min(rest, budget);
  const int64_t chunk = limits_.state_chunk, end = (s.computed + budget) / chunk * chunk;
  if (end > s.computed) return end - s.computed;
  return std::min(rest, (s.computed / chunk + 1) * chunk - s.computed);  // past the budget, by less than a chunk
}

void Scheduler::plan_keeps(StepRow& row) {
  if (snapshots_.empty()) return;
  const Sequence& s = *row.seq;
  const int64_t every = snapshot_every();
  for (const int64_t boundary : {s.branch_at, (static_cast<int64_t>(s.tokens.size()) - 1) / every * every}) {
    if (boundary <= row.begin || boundary > row.begin + row.count) continue;
    if (!row.keeps.empty() && row.keeps.back().at == boundary) continue;
    if (const int32_t page = published_page(s.tokens, boundary); page >= 0 && snapshot_at(page) >= 0) continue;
    Snapshot* pick = nullptr;
    for (Snapshot& k : snapshots_)
      if (k.page != kReserved && (!pick || (k.page == kFree) > (pick->page == kFree) ||
                                  ((k.page == kFree) == (pick->page == kFree) && k.used < pick->used)))
        pick = &k;
    if (!pick) return;  // every one reserved in this step
    pick->page = kReserved;
    pick->used = ++snapshot_clock_;
    row.keeps.push_back({static_cast<int32_t>(pick - snapshots_.data()), boundary});
  }
}

std::string Scheduler::submit(Request r) {
  const int64_t n = static_cast<int64_t>(r.prompt.size()), m = r.params.max_new_tokens;
  if (n == 0) return "the prompt has no tokens";
  if (m < 1) return str("max_new_tokens = ", m, " must be at least 1");
  if (std::string why = admission_problem(n, m, PoolLimits{limits_.max_seq, pages_.page_size(), pages_.num_pages()});
      !why.empty())
    return why;
  auto s = std::make_unique<Sequence>();
  s->tokens = r.prompt;
  s->prompt_len = n;
  if (r.params.uses_seen()) s->seen = linnet::distinct_ids(r.prompt);
  s->request = std::move(r);
  s->arrival = next_arrival_++;
  wait_in_line(std::move(s));
  return "";
}

void Scheduler::wait_in_line(std::unique_ptr<Sequence> s) {
  auto after = [&](const std::unique_ptr<Sequence>& w) {
    const int64_t a = w->request.params.priority, b = s->request.params.priority;
    return a > b || (a == b && w->arrival > s->arrival);
  };
  waiting_.insert(std::find_if(waiting_.begin(), waiting_.end(), after), std::move(s));
}

Sequence& Scheduler::victim() {
  Sequence* v = running_.back().get();
  for (const auto& s : running_)
    if (s->request.params.priority > v->request.params.priority ||
        (s->request.params.priority == v->request.params.priority && s->admitted > v->admitted))
      v = s.get();
  return *v;
}

bool Scheduler::ensure_pages(Sequence& s, int64_t end) {
  const int64_t ps = pages_.page_size(), need = (end + ps - 1) / ps;
  while (static_cast<int64_t>(s.pages.size()) < need) {
    const int32_t p = pages_.allocate();
    if (p < 0) return false;
    s.pages.push_back(p);
  }
  return true;
}

void Scheduler::release(Sequence& s) {
  for (int32_t p : s.pages) let_go(p);
  s.pages.clear();
  s.computed = s.published = 0;
  if (s.state_slot >= 0) free_slots_.push_back(s.state_slot);  // its state is recomputed if it runs again
  s.state_slot = -1;
}

// Its pages go back; its tokens (prompt and what it generated) stay, to be recomputed when it
// is admitted again — in line by its priority and arrival, ahead of everything that came
// after it, so it loses no more time than it must.
void Scheduler::preempt(Sequence& s) {
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &s; });
  LINNET_CHECK(it != running_.end(), "preempting a sequence that is not running");
  release(s);
  ++s.preemptions;
  ++preemptions_;
  std::unique_ptr<Sequence> held = std::move(*it);
  running_.erase(it);
  wait_in_line(std::move(held));
}

// Starts a waiting sequence: full pages of its tokens that a running sequence already holds
// are shared (never its last page: at least one token is computed, for its logits) — with a
// recurrent state, only up to the last of them that a snapshot was kept at the end of, which
// the first chunk restores — then the pages of its first chunk are allocated. False (nothing
// held) when they are not free.
bool Scheduler::admit(std::unique_ptr<Sequence>& s, int64_t& budget, std::vector<StepRow>& rows) {
  const int64_t ps = pages_.page_size(), n = static_cast<int64_t>(s->tokens.size());
  int32_t parent = -1;
  for (int64_t j = 0; j < (sharing() ? (n - 1) / ps : 0); ++j) {
    const int32_t page = pages_.share(s->tokens, j, parent);
    if (page < 0) break;
    s->pages.push_back(page);
    parent = page;
  }
  int32_t restore = -1;
  if (limits_.state_slots > 0) {
    s->branch_at = static_cast<int64_t>(s->pages.size()) * ps / snapshot_every() * snapshot_every();
    while (!s->pages.empty() && (restore = snapshot_at(s->pages.back())) < 0) {
      let_go(s->pages.back());
      s->pages.pop_back();
    }
    if (s->branch_at <= static_cast<int64_t>(s->pages.size()) * ps) s->branch_at = 0;  // a snapshot is there (or past it)
  }
  s->published = static_cast<int64_t>(s->pages.size());  // shared pages are published already
  s->computed = s->published * ps;
  // Whole prompts: the prompt in one chunk, past the budget only as a step's only row.
  if (limits_.whole_prompts && n - s->computed > budget && !(rows.empty() && running_.empty())) return false;
  const int64_t chunk = piece(*s, budget);
  if (!ensure_pages(*s, s->computed + chunk) || (limits_.state_slots > 0 && free_slots_.empty())) {
    release(*s);
    return false;
  }
  if (limits_.state_slots > 0) {
    s->state_slot = free_slots_.back();
    free_slots_.pop_back();
  }
  s->admitted = next_admission_++;
  rows.push_back({s.get(), s->computed, chunk, s->computed + chunk == n});
  if (restore >= 0) {
    rows.back().restore = restore;
    snapshots_[static_cast<size_t>(restore)].used = ++snapshot_clock_;
  }
  plan_keeps(rows.back());
  budget -= std::min(chunk, budget);
  running_.push_back(std::move(s));
  return true;
}

bool Scheduler::cancel(size_t index) {
  auto is = [&](const std::unique_ptr<Sequence>& s) { return s->request.index == index; };
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), is); it != waiting_.end()) {
    release(**it);  // a preempted sequence holds none; a fresh one neither
    waiting_.erase(it);
    return true;
  }
  if (auto it = std::find_if(running_.begin(), running_.end(), is); it != running_.end()) {
    release(**it);
    running_.erase(it);
    return true;
  }
  return false;
}

std::vector<StepRow> Scheduler::schedule() {
  std::vector<StepRow> rows;
  int64_t budget = limits_.token_budget;
  const int64_t preempted_before = preemptions_;
  // 1. Every decoding sequence (one token left to feed) gets its row; for its page, the
  //    running sequence of the largest priority value, the newest of them, is preempted —
  //    possibly itself, possibly one already given its row in this step.
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& s = *running_[i];
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (s.computed != n - 1) continue;
    bool gone = false;
    while (!ensure_pages(s, n)) {
      Sequence& v = victim();
      gone = &v == &s;
      const size_t at = static_cast<size_t>(std::find_if(running_.begin(), running_.end(),
                                                         [&](const auto& p) { return p.get() == &v; }) -
                                            running_.begin());
      preempt(v);
      if (at < i) {  // a row already in this step: out of it, and s moved up one place
        rows.erase(std::remove_if(rows.begin(), rows.end(), [&](const StepRow& r) { return r.seq == &v; }), rows.end());
        ++budget;
        --i;
      }
      if (gone) break;
    }
    if (gone) {
      --i;  // s left running_: the next sequence is at its place
      continue;
    }
    rows.push_back({&s, s.computed, 1, true});
    --budget;
  }
  // 2. Running sequences part-way through their prompt, a chunk each, while budget lasts.
  //    Out of pages, they wait for decoding rows to finish, unless nothing else runs.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& s = *running_[i];
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (s.computed >= n - 1) continue;
    // Whole prompts: a sequence recomputed at recompute_at runs whole (the budget may overrun once).
    const int64_t chunk = piece(s, budget);
    bool gone = false;
    while (!ensure_pages(s, s.computed + chunk)) {
      if (!rows.empty()) break;
      Sequence& v = victim();
      gone = &v == &s;
      preempt(v);
      if (gone) break;
    }
    if (gone) break;
    if (static_cast<int64_t>(s.pages.size()) * pages_.page_size() < s.computed + chunk) break;  // wait
    rows.push_back({&s, s.computed, chunk, s.computed + chunk == n});
    plan_keeps(rows.back());
    budget -= std::min(chunk, budget);
  }
  // 3. Waiting sequences, in order, while there is budget, a free row and pages — not in a
  //    step that had to preempt (the pages it freed are for the sequences that stay).
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < limits_.max_rows &&
         (preemptions_ == preempted_before || running_.empty())) {
    if (!admit(waiting_.front(), budget, rows)) {
      if (!rows.empty() || !running_.empty()) break;
      throw Error("scheduler: a request cannot start in an empty pool (its pages were checked at submit)");
    }
    waiting_.pop_front();
  }
  return rows;
}

std::vector<Completion> Scheduler::complete(const std::vector<StepRow>& rows, const std::vector<int32_t>& tokens,
                                            const std::vector<int32_t>& eos, const StopCheck& stop) {
  LINNET_CHECK(tokens.size() == rows.size(), tokens.size(), " tokens for ", rows.size(), " rows");
  const int64_t ps = pages_.page_size();
  std::vector<Completion> done;
  std::vector<Sequence*> finished;
  for (size_t i = 0; i < rows.size(); ++i) {
    Sequence& s = *rows[i].seq;
    s.computed += rows[i].count;
    for (; sharing() && (s.published + 1) * ps <= s.computed; ++s.published) {
      const size_t j = static_cast<size_t>(s.published);
      pages_.publish(s.pages[j], s.tokens, s.published, j ? s.pages[j - 1] : -1);
    }
    for (const StepRow::Keep& keep : rows[i].keeps) {
      // The state at keep.at is known by the published page that ends there: this sequence's
      // own, or another's that held the same tokens first. None (given up meanwhile): not kept.
      Snapshot& k = snapshots_[static_cast<size_t>(keep.snapshot)];
      const int32_t page = published_page(s.tokens, keep.at);
      k.page = page >= 0 && snapshot_at(page) < 0 ? page : kFree;
    }
    if (!rows[i].sample) continue;
    const int32_t t = tokens[i];
    LINNET_CHECK(t >= 0, "no token chosen for a sampling row");
    s.tokens.push_back(t);
    const SamplingParams& p = s.request.params;
    if (p.uses_seen()) linnet::add_seen(s.seen, t);
    if (p.uses_counts()) linnet::add_count(s.counts, t);
    // Before min_tokens nothing stops it (vLLM's rule; its processors banned EOS and the stop ids).
    const bool may_stop = s.generated() >= p.min_tokens;
    const bool at_stop_id = may_stop && std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t) !=
                                            p.stop_token_ids.end();
    const bool at_eos = may_stop && !p.ignore_eos && std::find(eos.begin(), eos.end(), t) != eos.end();
    const bool full = s.generated() >= p.max_new_tokens;
    std::vector<int32_t> generated;
    if (stop || at_eos || at_stop_id || full) generated.assign(s.tokens.begin() + s.prompt_len, s.tokens.end());
    // The stop strings see every token (their text is decoded as it comes), but end it only
    // past min_tokens.
    const bool at_stop = !at_eos && !at_stop_id && stop && stop(s.request.index, generated) && may_stop;
    if (!at_eos && !at_stop && !at_stop_id && !full) {
      // Its keys so far were rotated for a shorter sequence: all of them again, in one chunk.
      if (limits_.recompute_at > 0 && s.computed == limits_.recompute_at &&
          static_cast<int64_t>(s.tokens.size()) == limits_.recompute_at + 1)
        s.computed = 0;
      continue;
    }
    const FinishReason reason = at_eos || at_stop || at_stop_id ? FinishReason::stop : FinishReason::length;
    done.push_back(Completion{s.request.index, std::move(generated), reason, s.prompt_len, s.preemptions,
                              at_stop_id ? t : -1});
    finished.push_back(&s);
  }
  for (Sequence* s : finished) {
    release(*s);
    running_.erase(std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == s; }));
  }
  return done;
}

}  // namespace linnet::engine
