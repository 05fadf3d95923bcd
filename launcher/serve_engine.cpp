#include "launcher/serve_engine.h"

#include <algorithm>

#include "core/error.h"
#include "launcher/stop_text.h"
#include "layers/model.h"

namespace linnet::cli {

size_t releasable(const std::string& text, const std::vector<std::string>& stop) {
  size_t keep = 0;
  for (const std::string& s : stop)
    for (size_t k = std::min(s.size() - 1, text.size()); k > keep; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  return text.size() - keep;
}

ReplicaEngine::ReplicaEngine(Model& model, engine::SchedulerLimits limits, std::vector<int32_t> eos,
                             const Tokenizer& tokenizer, int replica)
    : model_(model), gen_(model, limits, std::move(eos)), tok_(tokenizer), replica_(replica) {}

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
    // The decoder reads the prompt first (its text dropped), so the first token keeps the
    // space SentencePiece drops at the start of a text (as `linnet generate`).
    Live live{job, tok_.decoder(true), "", 0, false, {}, 0};
    for (int32_t t : job.prompt) live.decoder.push(t);
    live.decoder.flush();
    live_.emplace(job.id, std::move(live));
  }
  for (uint64_t id : plan.cancels) {
    if (live_.erase(id)) gen_.cancel(static_cast<size_t>(id));
    scoring_.erase(std::remove_if(scoring_.begin(), scoring_.end(), [&](const ServeJob& j) { return j.id == id; }),
                   scoring_.end());
  }
}

ReplicaStatus ReplicaEngine::status() const {
  return {static_cast<int64_t>(gen_.running()), static_cast<int64_t>(gen_.waiting() + scoring_.size()),
          gen_.pages().used_pages(), gen_.pages().num_pages()};
}

// Teacher-forced scoring of prompt + completion, as `linnet eval` scores (its numbers).
void ReplicaEngine::score(const ServeJob& job, const std::vector<int32_t>& generated, JobEvent& e) {
  std::vector<int64_t> all(job.prompt.begin(), job.prompt.end());
  all.insert(all.end(), generated.begin(), generated.end());
  const int64_t n = static_cast<int64_t>(all.size()) - 1;
  if (n < 1) return;
  std::vector<int64_t> pos(static_cast<size_t>(n)), seg(static_cast<size_t>(n), 0);
  for (int64_t k = 0; k < n; ++k) pos[k] = k;
  TopTokens top{job.logprobs, {}, {}};
  auto [lp, greedy] = model_.score_packed(Tensor::from_ints({n}, std::vector<int64_t>(all.begin(), all.end() - 1)),
                                          Tensor::from_ints({n}, pos), Tensor::from_ints({n}, seg),
                                          Tensor::from_ints({n}, std::vector<int64_t>(all.begin() + 1, all.end()), DType::i64),
                                          false, job.logprobs > 0 ? &top : nullptr);
  e.token_logprobs = lp.to_floats();
  e.top.resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n && job.logprobs > 0; ++k)
    for (int64_t j = 0; j < top.n; ++j)
      if (top.ids[k * top.n + j] >= 0) e.top[k].push_back({top.ids[k * top.n + j], top.logprobs[k * top.n + j]});
}

JobEvent ReplicaEngine::finish(Live& live, const std::vector<int32_t>& generated, const std::string& reason) {
  if (!live.stopped) live.text += live.decoder.flush();
  // From the completion's own tokens: the stop check never saw an end-of-sequence token.
  JobEvent e{live.job.id, std::vector<int32_t>(generated.begin() + static_cast<std::ptrdiff_t>(live.tokens_sent), generated.end()),
             live.text.substr(std::min(live.sent, live.text.size())), true, reason, "", {}, {}};
  if (live.job.logprobs >= 0) score(live.job, generated, e);
  return e;
}

StepReport ReplicaEngine::step() {
  StepReport report;
  report.replica = replica_;
  if (!gen_.idle()) {
    const engine::StopCheck stop = [&](size_t index, const std::vector<int32_t>& generated) {
      Live& l = live_.at(static_cast<uint64_t>(index));
      l.fresh.push_back(generated.back());
      const size_t before = l.text.size();
      l.text += l.decoder.push(generated.back());
      if (cut_at_stop(l.text, before, l.job.stop)) l.stopped = true;
      return l.stopped;
    };
    std::vector<engine::Completion> done = gen_.step(stop);
    for (engine::Completion& c : done) {
      auto it = live_.find(static_cast<uint64_t>(c.index));
      report.events.push_back(finish(it->second, c.tokens, engine::finish_reason_name(c.reason)));
      live_.erase(it);
    }
    for (auto& [id, l] : live_) {
      if (l.fresh.empty()) continue;
      const size_t upto = std::max(l.sent, releasable(l.text, l.job.stop));
      l.tokens_sent += l.fresh.size();
      report.events.push_back(JobEvent{id, std::move(l.fresh), l.text.substr(l.sent, upto - l.sent), false, "", "", {}, {}});
      l.fresh.clear();
      l.sent = upto;
    }
  }
  // Prompts to score alone: a few per step, so decoding rows are not kept waiting long.
  for (int k = 0; k < 8 && !scoring_.empty(); ++k) {
    const ServeJob job = scoring_.front();
    scoring_.pop_front();
    JobEvent e{job.id, {}, "", true, "length", "", {}, {}};
    if (job.logprobs >= 0) score(job, {}, e);
    report.events.push_back(std::move(e));
  }
  report.status = status();
  return report;
}

}  // namespace linnet::cli
