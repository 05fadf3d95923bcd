#include "serve/replica_engine.h"

#include <algorithm>

#include "core/error.h"
#include "layers/model.h"

namespace linnet::serve {

ReplicaEngine::ReplicaEngine(Model& model, engine::SchedulerLimits limits, std::vector<int32_t> eos,
                             const Tokenizer& tokenizer, int replica)
    : gen_(model, limits, std::move(eos)), evaluator_(model, model.generics().max_seq), tok_(tokenizer),
      replica_(replica) {}

void ReplicaEngine::apply(const StepPlan& plan) {
  for (const ServeJob& job : plan.jobs) {
    if (job.replica != replica_) continue;
    if (job.params.max_new_tokens == 0) {
      scoring_.push_back(job);
      continue;
    }
    engine::Request r;
    r.index = static_cast<size_t>(job.id);
    r.prompt = job.prompt;
    r.params = job.params;
    // The front checked what submit checks; a refusal here would be a bug, reported as one.
    const std::string why = gen_.submit(r);
    LINNET_CHECK(why.empty(), "serve: job ", job.id, " refused after its checks: ", why);
    // The front checked the parser against this vocabulary before the job was planned.
    auto parser = job.reasoning_parser.empty() ? nullptr
                                               : engine::make_reasoning_parser(job.reasoning_parser, tok_, job.thinking);
    live_.emplace(job.id, Live{job,
                               engine::CompletionText(tok_, job.prompt, job.stop,
                                                      {job.skip_special, job.include_stop_str, job.params.min_tokens},
                                                      std::move(parser)),
                               0, 0, {}, 0});
  }
  for (uint64_t id : plan.cancels) {
    if (live_.erase(id)) gen_.cancel(static_cast<size_t>(id));
    scoring_.erase(std::remove_if(scoring_.begin(), scoring_.end(), [&](const ServeJob& j) { return j.id == id; }),
                   scoring_.end());
  }
}

ReplicaStatus ReplicaEngine::status() const {
  return {static_cast<int64_t>(gen_.running()), static_cast<int64_t>(gen_.waiting() + scoring_.size()),
          gen_.pages().used_pages(), gen_.pages().num_pages(), gen_.stats().preemptions};
}

// Teacher-forced scoring of prompt + completion, by the evaluator `linnet eval` scores with.
void ReplicaEngine::score(const ServeJob& job, const std::vector<int32_t>& generated, JobEvent& e) {
  std::vector<int32_t> all(job.prompt.begin(), job.prompt.end());
  all.insert(all.end(), generated.begin(), generated.end());
  if (all.size() < 2) return;
  engine::Window w;
  w.context = {all[0]};
  w.scored.assign(all.begin() + 1, all.end());
  w.per_token = true;
  w.top = std::max<int64_t>({0, job.logprobs, job.prompt_logprobs});
  w.ranks = job.prompt_logprobs >= 0;
  std::vector<engine::WindowScore> scores;
  evaluator_.score({w}, scores);
  e.token_logprobs = std::move(scores[0].token_logprobs);
  e.top = std::move(scores[0].top);
  e.top.resize(e.token_logprobs.size());
  e.ranks = std::move(scores[0].ranks);
}

JobEvent ReplicaEngine::finish(Live& live, const engine::Completion& c) {
  live.text.finish(c);
  const std::vector<int32_t>& generated = c.tokens;
  // From the completion's own tokens: the stop check never saw an end-of-sequence token.
  JobEvent e;
  e.id = live.job.id;
  e.tokens.assign(generated.begin() + static_cast<std::ptrdiff_t>(live.tokens_sent), generated.end());
  e.text = live.text.text().substr(std::min(live.sent, live.text.text().size()));
  e.reasoning = live.text.reasoning().substr(std::min(live.reasoning_sent, live.text.reasoning().size()));
  e.tool_calls = live.text.tool_calls();
  e.done = true;
  e.finish_reason = engine::finish_reason_name(c.reason);
  e.stop_string = live.text.stop_string();
  e.stop_token = c.stop_token;
  if (live.job.logprobs >= 0 || live.job.prompt_logprobs >= 0) score(live.job, generated, e);
  return e;
}

StepReport ReplicaEngine::step() {
  StepReport report;
  report.replica = replica_;
  if (!gen_.idle()) {
    const engine::StopCheck stop = [&](size_t index, const std::vector<int32_t>& generated) {
      Live& l = live_.at(static_cast<uint64_t>(index));
      l.fresh.push_back(generated.back());
      return l.text.push(generated.back());
    };
    std::vector<engine::Completion> done = gen_.step(stop);
    for (engine::Completion& c : done) {
      auto it = live_.find(static_cast<uint64_t>(c.index));
      report.events.push_back(finish(it->second, c));
      live_.erase(it);
    }
    for (auto& [id, l] : live_) {
      if (l.fresh.empty()) continue;
      const size_t upto = std::max(l.sent, l.text.releasable());
      l.tokens_sent += l.fresh.size();
      JobEvent& e = report.events.emplace_back();
      e.id = id;
      e.tokens = std::move(l.fresh);
      e.text = l.text.text().substr(l.sent, upto - l.sent);
      e.reasoning = l.text.reasoning().substr(l.reasoning_sent);
      l.fresh.clear();
      l.sent = upto;
      l.reasoning_sent = l.text.reasoning().size();
    }
  }
  // Prompts to score alone: a few per step, so decoding rows are not kept waiting long.
  for (int k = 0; k < 8 && !scoring_.empty(); ++k) {
    const ServeJob job = scoring_.front();
    scoring_.pop_front();
    JobEvent e;
    e.id = job.id;
    e.done = true;
    e.finish_reason = "length";
    if (job.logprobs >= 0 || job.prompt_logprobs >= 0) score(job, {}, e);
    report.events.push_back(std::move(e));
  }
  report.status = status();
  return report;
}

}  // namespace linnet::serve
