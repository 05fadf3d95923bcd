#include "serve/jobs.h"

namespace linnet::serve {

using nlohmann::json;

json to_json(const StepPlan& p) {
  json jobs = json::array();
  for (const ServeJob& j : p.jobs) {
    const auto& s = j.params;
    jobs.push_back({{"id", j.id}, {"replica", j.replica}, {"prompt", j.prompt}, {"max_new", s.max_new_tokens},
                    {"temperature", s.temperature}, {"top_k", s.top_k}, {"top_p", s.top_p}, {"seed", s.seed},
                    {"ignore_eos", s.ignore_eos}, {"stop", j.stop}, {"logprobs", j.logprobs}});
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
    job.params.max_new_tokens = x.at("max_new").get<int64_t>();
    job.params.temperature = x.at("temperature").get<float>();
    job.params.top_k = x.at("top_k").get<int64_t>();
    job.params.top_p = x.at("top_p").get<float>();
    job.params.seed = x.at("seed").get<uint64_t>();
    job.params.ignore_eos = x.at("ignore_eos").get<bool>();
    job.stop = x.at("stop").get<std::vector<std::string>>();
    job.logprobs = x.at("logprobs").get<int64_t>();
    p.jobs.push_back(std::move(job));
  }
  p.cancels = j.at("cancels").get<std::vector<uint64_t>>();
  p.shutdown = j.at("shutdown").get<bool>();
  return p;
}

json to_json(const StepReport& r) {
  json events = json::array();
  for (const JobEvent& e : r.events) {
    json x = {{"id", e.id}, {"tokens", e.tokens}, {"text", e.text}, {"done", e.done}};
    if (e.done) {
      x["finish_reason"] = e.finish_reason;
      x["error"] = e.error;
      x["token_logprobs"] = e.token_logprobs;
      x["top"] = e.top;
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
    e.done = x.at("done").get<bool>();
    if (e.done) {
      e.finish_reason = x.at("finish_reason").get<std::string>();
      e.error = x.at("error").get<std::string>();
      e.token_logprobs = x.at("token_logprobs").get<std::vector<float>>();
      e.top = x.at("top").get<std::vector<std::vector<std::pair<int32_t, float>>>>();
    }
    r.events.push_back(std::move(e));
  }
  const auto s = j.at("status").get<std::vector<int64_t>>();
  r.status = {s.at(0), s.at(1), s.at(2), s.at(3), s.at(4)};
  return r;
}

}  // namespace linnet::serve
