// One replica's engine for `linnet serve`: every rank of the replica holds one and feeds it
// the same plans, so all shards take the same steps (the model's collectives pair up). It
// runs the batch engine's Generator, decodes text for stop strings as `linnet generate`
// does (engine::CompletionText), scores prompts and completions for log-probabilities as
// `linnet eval` does (engine::Evaluator), and says what happened.
#pragma once
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "engine/completion_text.h"
#include "engine/evaluator.h"
#include "engine/generator.h"
#include "serve/jobs.h"
#include "tokenizer/tokenizer.h"

namespace linnet::serve {

class ReplicaEngine {
 public:
  ReplicaEngine(Model& model, engine::SchedulerLimits limits, std::vector<int32_t> eos, const Tokenizer& tokenizer,
                int replica);

  // This replica's jobs of the plan are queued, its cancels done (pages freed at once).
  void apply(const StepPlan& plan);
  bool idle() const { return gen_.idle() && scoring_.empty(); }
  // One engine step (if anything runs) and the scoring of jobs that asked for it.
  StepReport step();
  ReplicaStatus status() const;

 private:
  struct Live {
    ServeJob job;
    engine::CompletionText text;  // decoded so far (cut at a stop string), as generate's
    size_t sent = 0;              // text released in events
    size_t reasoning_sent = 0;    // reasoning released in events
    std::vector<int32_t> fresh;   // tokens of this step
    size_t tokens_sent = 0;       // tokens reported in events
  };
  JobEvent finish(Live& live, const engine::Completion& c);
  void score(const ServeJob& job, const std::vector<int32_t>& generated, JobEvent& e);

  engine::Generator gen_;
  engine::Evaluator evaluator_;
  const Tokenizer& tok_;
  int replica_;
  std::map<uint64_t, Live> live_;
  std::deque<ServeJob> scoring_;  // max_new_tokens 0: the prompt alone, scored
};

}  // namespace linnet::serve
