// One replica's engine for `linnet serve`: every rank of the replica holds one and feeds it
// the same plans, so all shards take the same steps (the model's collectives pair up). It
// runs the batch engine's Generator, decodes text for stop strings as `linnet generate`
// does, scores prompts and completions for log-probabilities, and says what happened.
#pragma once
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "launcher/serve_jobs.h"
#include "tokenizer/tokenizer.h"

namespace linnet::cli {

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
    Decoder decoder;
    std::string text;   // decoded so far (cut at a stop string)
    size_t sent = 0;    // text released in events
    bool stopped = false;
    std::vector<int32_t> fresh;  // tokens of this step
    size_t tokens_sent = 0;      // tokens reported in events
  };
  JobEvent finish(Live& live, const std::vector<int32_t>& generated, const std::string& reason);
  void score(const ServeJob& job, const std::vector<int32_t>& generated, JobEvent& e);

  Model& model_;
  engine::Generator gen_;
  const Tokenizer& tok_;
  int replica_;
  std::map<uint64_t, Live> live_;
  std::deque<ServeJob> scoring_;  // max_new_tokens 0: the prompt alone, scored
};

// How much of `text` may be released while `stop` strings could still complete: all but its
// longest end that is the start of a stop string.
size_t releasable(const std::string& text, const std::vector<std::string>& stop);

}  // namespace linnet::cli
