// What passes between `linnet serve`'s HTTP side (world rank 0) and the replicas' engines:
// jobs (one prompt, one choice of a request), the plan every step starts with (broadcast to
// every rank, so all shards of a replica run the same steps), and what each replica reports
// back. Plain structs with a JSON form for the MPI messages between ranks.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace linnet::serve {

struct ServeJob {
  uint64_t id = 0;
  int replica = 0;
  std::vector<int32_t> prompt;
  engine::SamplingParams params;  // max_new_tokens 0: the prompt is only scored (echo)
  std::vector<std::string> stop;
  int64_t logprobs = -1;          // -1: none; n ≥ 0: each token's log-probability and the n likeliest
  int64_t prompt_logprobs = -1;   // -1: none; n ≥ 0: the prompt's tokens' too (vLLM's prompt_logprobs)
  bool include_stop_str = false;  // a stop string that ended it stays in the text
  bool skip_special = true;       // special tokens give no text
  std::string reasoning_parser;   // chat: engine/reasoning.h's name, "" none
  bool thinking = true;           // false: the request turned thinking off (qwen3's enable_thinking)
};

// A job's news from one step: the tokens it generated and the text they release (text that
// could be the start of a stop string is held back until it is known not to be), and at the
// end why it finished and, when asked, the log-probabilities of prompt + completion.
struct JobEvent {
  uint64_t id = 0;
  std::vector<int32_t> tokens;
  std::string text;
  bool done = false;
  std::string finish_reason;  // "stop" or "length"
  std::string error;          // the job could not run (done is true)
  // Position p ≥ 1 of prompt + completion: log p(token p | tokens before), and the top-n.
  std::vector<float> token_logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top;
  std::vector<int64_t> ranks;  // prompt_logprobs: each token's rank in the vocabulary (position p ≥ 1)
  // vLLM's stop_reason: the stop string or stop id that ended it (neither: "" and -1).
  std::string stop_string;
  int32_t stop_token = -1;
  // With a reasoning parser: the reasoning's text these tokens release, and at the end the
  // messages to a recipient (harmony's tool calls), (recipient, body).
  std::string reasoning;
  std::vector<std::pair<std::string, std::string>> tool_calls;
};

struct ReplicaStatus {
  int64_t running = 0, waiting = 0, pages_used = 0, pages_total = 0;
  int64_t preemptions = 0;  // since the start: running jobs whose pages were taken (recomputed later)
};

struct StepPlan {
  std::vector<ServeJob> jobs;
  std::vector<uint64_t> cancels;
  bool shutdown = false;
};

struct StepReport {
  int replica = 0;
  std::vector<JobEvent> events;
  ReplicaStatus status;
};

nlohmann::json to_json(const StepPlan& p);
StepPlan plan_from_json(const nlohmann::json& j);
nlohmann::json to_json(const StepReport& r);
StepReport report_from_json(const nlohmann::json& j);

}  // namespace linnet::serve
