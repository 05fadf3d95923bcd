// Continuous batching over the paged pool (vLLM's scheduler, in small): requests wait, are
// admitted while others decode, prefill in chunks under a token budget per step, decode one
// token a step, and finish. When pages run out the newest running request is preempted —
// its pages freed, its tokens so far kept — and recomputed later; it is never failed. The
// scheduler knows requests, tokens and pages; the Generator turns its plans into model calls.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/page_allocator.h"
#include "engine/request.h"

namespace linnet::engine {

struct SchedulerLimits {
  int64_t max_seq = 0;           // MaxSeq: positions one sequence may use
  int64_t max_rows = 256;        // requests running at once (rows of a step)
  int64_t token_budget = 512;    // tokens a step computes (a decoding row counts one)
  // Each prompt (or recomputed sequence) in one chunk, and no pages shared between sequences:
  // for a model whose RoPE follows a sequence's length in the call (dynamic NTK, longrope),
  // where a chunk boundary or a prefix computed by another request would change the numbers.
  // A prompt past the budget then runs in a step of its own.
  bool whole_prompts = false;
  // > 0: a sequence whose next token to feed sits at this position, every earlier one cached,
  // is recomputed whole instead (ModelConfig::recompute_cache_at: Phi-3's longrope switches
  // to its long factors there, and transformers recomputes the keys with them). Needs
  // whole_prompts (the recomputation runs in one chunk).
  int64_t recompute_at = 0;
  // > 0: the model keeps a recurrent state per sequence (Gated DeltaNet layers) in one of this
  // many state slots (Batch): each running sequence holds one from admission until it finishes,
  // is preempted (recomputed from its start later) or is cancelled. A shared prefix's pages do
  // not bring its state with them, so pages are shared only up to a page boundary where a
  // snapshot of the state was kept (below); with no snapshots, none are.
  int64_t state_slots = 0;
  // Snapshots of the recurrent state (Generics::state_snapshots), kept at page boundaries while
  // the published page ending there stays published: a prompt's deepest boundary (where the
  // pages a sequence with the same prompt would share end: n samples, repeated prompts), and the
  // boundary where a sequence's shared pages ended without a snapshot (a common system prompt:
  // the second sequence recomputes it and keeps the state where it branches off, the third and
  // later restore it). A sequence that shares the page restores the snapshot into its slot
  // instead of recomputing the prefix (vLLM's prefix caching for such models). When all are
  // taken the least recently used one is given up.
  int64_t state_snapshots = 0;
  // > 0: the recurrent state's aligned chunk (kDeltaRuleChunk): the delta rule runs the tokens at
  // positions [k·chunk, (k + 1)·chunk) of a sequence by its chunked form when they are in one step,
  // so a prompt's pieces end at multiples of it or at the prompt's end — where what is left of
  // this step's budget reaches no multiple, the piece goes on to the next one, past the budget by
  // less than a chunk (waiting instead would stall prompts behind decoding rows) — and snapshots
  // are kept only at multiples of both it and PageSize. A token's result is then the same
  // whatever shared its steps.
  int64_t state_chunk = 0;
  // > 0: the engine uses at most this many of the model's cache pages (the rest stay unused): a
  // pool smaller than Batch rows' (tests of preemption where Batch bounds the rows, as the
  // state slots do).
  int64_t max_pages = 0;
};

// A request in the scheduler: its tokens so far (prompt, then generated) and its pages.
struct Sequence {
  Request request;
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t prompt_len = 0;       // the request's own prompt
  int64_t computed = 0;         // tokens whose K/V are in the pages (from the start)
  int64_t published = 0;        // full pages offered for sharing
  std::vector<int32_t> pages;   // page j holds positions j·PageSize …
  int64_t preemptions = 0;
  int32_t state_slot = -1;      // its recurrent state's slot while running (SchedulerLimits::state_slots)
  int64_t branch_at = 0;        // > 0: its shared pages ended here with no snapshot (one is kept here)
  uint64_t admitted = 0;        // admission order (the newest is preempted first)
  uint64_t arrival = 0;         // submission order (the waiting line: priority, then arrival)
  // What its logit processors read, kept as tokens come (only when its params use them):
  std::vector<int32_t> seen;                           // repetition_penalty: distinct ids, sorted
  std::vector<std::pair<int32_t, int32_t>> counts;     // presence/frequency: generated ids, counts

  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
};

// One row of a step: `count` tokens of `seq` from position `begin`; `sample` when the last of
// them is the sequence's last token (its logits give the next token).
struct StepRow {
  Sequence* seq = nullptr;
  int64_t begin = 0, count = 0;
  bool sample = false;
  // Recurrent state snapshots: `restore` is copied into the sequence's slot before its tokens
  // (the state up to `begin`); each keep's snapshot receives the state after position at − 1.
  int32_t restore = -1;
  struct Keep {
    int32_t snapshot = -1;
    int64_t at = 0;
  };
  std::vector<Keep> keeps;
};

class Scheduler {
 public:
  Scheduler(PageAllocator& pages, SchedulerLimits limits);

  // Queues a request; returns "" or why it can never run (prompt + max_new_tokens beyond
  // MaxSeq, or more pages than the pool has) — the others are not affected.
  std::string submit(Request r);

  bool idle() const { return waiting_.empty() && running_.empty(); }
  size_t waiting() const { return waiting_.size(); }
  size_t running() const { return running_.size(); }

  // The next step's rows: decoding rows first, then prefill chunks, within the budget.
  // Preempts when a row cannot get its page. Empty only when idle.
  std::vector<StepRow> schedule();
  // After the model ran the step: K/V of the rows are written (pages are published for
  // sharing) and each sampling row got `token`. Returns the requests that finished.
  std::vector<Completion> complete(const std::vector<StepRow>& rows, const std::vector<int32_t>& tokens,
                                   const std::vector<int32_t>& eos, const StopCheck& stop);

  int64_t preemptions() const { return preemptions_; }
  // The state slots running sequences hold (tests: each slot held once, all back when idle).
  size_t free_state_slots() const { return free_slots_.size(); }
  // Snapshots that hold no kept state (tests: all back when the pages they belong to are).
  size_t free_snapshots() const;
  // Drops the request with this index, waiting or running: its pages go back at once (a
  // client that went away). False when no such request is here (finished already).
  bool cancel(size_t index);

 private:
  bool ensure_pages(Sequence& s, int64_t end);  // pages for positions [0, end)
  // Whether full pages are shared between sequences (not for whole prompts, nor with a state
  // that has no snapshots).
  bool sharing() const { return !limits_.whole_prompts && (limits_.state_slots == 0 || limits_.state_snapshots > 0); }
  // A page goes back; a snapshot kept at its end goes with it once no sequence holds the page.
  void let_go(int32_t page);
  // The snapshot kept at the end of this published page, or -1.
  int32_t snapshot_at(int32_t page) const;
  // The published page that ends the first `end` (a page boundary) of `tokens`, or -1.
  int32_t published_page(const std::vector<int32_t>& tokens, int64_t end) const;
  // A row that computes its sequence's branch point or its prompt's deepest page boundary
  // reserves a snapshot for the state there (a free one, else the least recently used is given
  // up), unless one is kept there already.
  void plan_keeps(StepRow& row);
  // Positions a snapshot may be kept at the multiples of: PageSize, or its least common multiple
  // with state_chunk.
  int64_t snapshot_every() const;
  // How many of s's tokens to feed from s.computed in a step with `budget` (> 0) left: all that
  // fit, or state_chunk's rule.
  int64_t piece(const Sequence& s, int64_t budget) const;
  void preempt(Sequence& s);
  void release(Sequence& s);
  bool admit(std::unique_ptr<Sequence>& s, int64_t& budget, std::vector<StepRow>& rows);
  // Into the waiting line by (priority, arrival): lower priority values first, then earlier.
  void wait_in_line(std::unique_ptr<Sequence> s);
  // The running sequence to preempt: the largest priority value, then the newest admitted.
  Sequence& victim();

  PageAllocator& pages_;
  SchedulerLimits limits_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  uint64_t next_admission_ = 0, next_arrival_ = 0;
  std::vector<int32_t> free_slots_;  // state slots no running sequence holds
  // Snapshots: the published page at whose end each was kept (kFree, kReserved while its step
  // runs), and when it was last kept or restored (the least recent is given up first).
  static constexpr int32_t kFree = -1, kReserved = -2;
  struct Snapshot {
    int32_t page = kFree;
    uint64_t used = 0;
  };
  std::vector<Snapshot> snapshots_;
  uint64_t snapshot_clock_ = 0;
  int64_t preemptions_ = 0;
};

}  // namespace linnet::engine
