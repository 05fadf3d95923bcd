#include "serve/jobs.h"

namespace linnet::serve {

using nlohmann::json;

json to_json(const StepPlan& p) {
  json jobs = json::array();
  for (const ServeJob& j : p.jobs) {
    jobs.push_back({{"id", j.id}, {"replica", j.replica}, {"prompt", j.prompt}, {"params", engine::to_json(j.params)},
                    {"stop", j.stop}, {"logprobs", j.logprobs}, {"prompt_logprobs", j.prompt_logprobs},
                    {"include_stop_str", j.include_stop_str}, {"skip_special", j.skip_special},
                    {"reasoning_parser", j.reasoning_parser}, {"thinking", j.thinking}});
  }
  return {{"jobs", jobs}, {"cancels", p.cancels}, {"shutdown", p.shutdown}};
}

StepPlan plan_from_json(const json& j) {
  StepPlan p;
  for (const json& x : j.at("jobs")) {
    ServeJob job;
    job.id = x.at("id").get<uint64_t>();
    job.replica = x.at("replica").get<int>();
    job.prompt = x.at("prompt").get<std::vector<int32_t>>();
    job.params = engine::sampling_from_json(x.at("params"));
    job.stop = x.at("stop").get<std::vector<std::string>>();
    job.logprobs = x.at("logprobs").get<int64_t>();
    job.prompt_logprobs = x.at("prompt_logprobs").get<int64_t>();
    job.include_stop_str = x.at("include_stop_str").get<bool>();
    job.skip_special = x.at("skip_special").get<bool>();
    job.reasoning_parser = x.at("reasoning_parser").get<std::string>();
    job.thinking = x.at("thinking").get<bool>();
    p.jobs.push_back(std::move(job));
  }
  p.cancels = j.at("cancels").get<std::vector<uint64_t>>();
  p.shutdown = j.at("shutdown").get<bool>();
  return p;
}

json to_json(const StepReport& r) {
  json events = json::array();
  for (const JobEvent& e : r.events) {
    json x = {{"id", e.id}, {"tokens", e.tokens}, {"text", e.text}, {"reasoning", e.reasoning}, {"done", e.done}};
    if (e.done) {
      x["finish_reason"] = e.finish_reason;
      x["error"] = e.error;
      x["token_logprobs"] = e.token_logprobs;
      x["top"] = e.top;
      x["ranks"] = e.ranks;
      x["stop_string"] = e.stop_string;
      x["stop_token"] = e.stop_token;
      x["tool_calls"] = e.tool_calls;
    }
    events.push_back(std::move(x));
  }
  const ReplicaStatus& s = r.status;
  return {{"replica", r.replica},
          {"events", events},
          {"status", {s.running, s.waiting, s.pages_used, s.pages_total, s.preemptions}}};
}

StepReport report_from_json(const json& j) {
  StepReport r;
  r.replica = j.at("replica").get<int>();
  for (const json& x : j.at("events")) {
    JobEvent e;
    e.id = x.at("id").get<uint64_t>();
    e.tokens = x.at("tokens").get<std::vector<int32_t>>();
    e.text = x.at("text").get<std::string>();
    e.reasoning = x.at("reasoning").get<std::string>();
    e.done = x.at("done").get<bool>();
    if (e.done) {
      e.finish_reason = x.at("finish_reason").get<std::string>();
      e.error = x.at("error").get<std::string>();
      e.token_logprobs = x.at("token_logprobs").get<std::vector<float>>();
      e.top = x.at("top").get<std::vector<std::vector<std::pair<int32_t, float>>>>();
      e.ranks = x.at("ranks").get<std::vector<int64_t>>();
      e.stop_string = x.at("stop_string").get<std::string>();
      e.stop_token = x.at("stop_token").get<int32_t>();
      e.tool_calls = x.at("tool_calls").get<std::vector<std::pair<std::string, std::string>>>();
    }
    r.events.push_back(std::move(e));
  }
  const auto s = j.at("status").get<std::vector<int64_t>>();
  r.status = {s.at(0), s.at(1), s.at(2), s.at(3), s.at(4)};
  return r;
}

}  // namespace linnet::serve
