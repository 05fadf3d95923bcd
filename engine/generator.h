// The generation engine: a Scheduler over the model's paged pool, each step one call with
// every row's next token chosen next to the logits: the step's BatchPlan (layers/batch_plan.h)
// built here once from the scheduler's rows and run as it is (Model::run_batch). The model
// sees a batch of tokens, never requests.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/page_allocator.h"
#include "engine/request.h"
#include "engine/scheduler.h"

namespace linnet {
class Model;
}

namespace linnet::engine {

struct GeneratorStats {
  int64_t steps = 0;
  int64_t prefill_tokens = 0;    // prompt tokens computed (recomputed ones after a preemption too)
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t peak_pages = 0;
  int64_t restored_tokens = 0;  // prompt tokens not computed: a recurrent state's snapshot brought them
};

// The ids a sequence may not choose next: the last id of each bad word whose other ids end its
// tokens, and, before min_tokens, EOS (unless ignore_eos) and the stop ids; sorted, distinct.
std::vector<int32_t> banned_ids(const Sequence& s, const std::vector<int32_t>& eos);

class Generator {
 public:
  // eos: every end-of-sequence id (config.json and generation_config.json).
  Generator(Model& model, SchedulerLimits limits, std::vector<int32_t> eos);
  ~Generator();

  // "" when queued, else why the request can never run.
  std::string submit(Request r);
  bool idle() const { return scheduler_.idle(); }
  size_t waiting() const { return scheduler_.waiting(); }
  size_t running() const { return scheduler_.running(); }

  // Drops a waiting or running request and frees its pages (false: not here).
  bool cancel(size_t index) { return scheduler_.cancel(index); }

  // Runs one step; returns the requests that finished in it.
  std::vector<Completion> step(const StopCheck& stop = {});
  const GeneratorStats& stats() const { return stats_; }
  const PageAllocator& pages() const { return pages_; }
  size_t free_state_slots() const { return scheduler_.free_state_slots(); }
  size_t free_snapshots() const { return scheduler_.free_snapshots(); }

 private:
  Model& model_;
  PageAllocator pages_;
  Scheduler scheduler_;
  std::vector<int32_t> eos_;
  GeneratorStats stats_;
};

}  // namespace linnet::engine
