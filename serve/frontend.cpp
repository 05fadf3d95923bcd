#include "serve/frontend.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "serve/openai_api.h"

namespace linnet::serve {

std::deque<JobEvent> RequestStream::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(m);
  cv.wait_for(lock, timeout, [&] { return !events.empty(); });
  std::deque<JobEvent> out;
  out.swap(events);
  return out;
}

namespace {
// Latency buckets (seconds): time to first token and request latency as vLLM's; between tokens
// finer than vLLM's (which start at 10 ms), for small models on CPUs.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,   0.25,  0.5,   0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                                         0.075, 0.1,    0.15,  0.2,  0.3,   0.4,  0.5,   0.75, 1.0,  2.5};
const std::vector<double> kRequestBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                             30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}  // namespace

Frontend::Frontend(int replicas, int64_t max_waiting)
    : outstanding_(static_cast<size_t>(replicas), 0),
      status_(static_cast<size_t>(replicas)),
      max_waiting_(max_waiting),
      ttft_(kTtftBuckets),
      itl_(kItlBuckets),
      e2e_(kRequestBuckets) {}

std::shared_ptr<RequestStream> Frontend::submit(std::vector<ServeJob>& jobs) {
  std::lock_guard lock(mu_);
  if (health_ == Health::draining) throw ApiError(503, "the server is shutting down");
  if (health_ == Health::failed) throw ApiError(503, "the engine failed: " + failure_);
  int64_t running = 0;
  for (const auto& s : status_) running += s.running;
  const int64_t waiting = static_cast<int64_t>(pending_.size()) - running;
  if (waiting + static_cast<int64_t>(jobs.size()) > max_waiting_) {
    ++rejected_total_;
    throw ApiError(503, str("the queue is full: ", std::max<int64_t>(waiting, 0), " jobs wait to run (--max-waiting ",
                            max_waiting_, "); try again later"));
  }
  auto stream = std::make_shared<RequestStream>();
  const auto now = Clock::now();
  for (ServeJob& job : jobs) {
    job.id = next_id_++;
    job.replica = static_cast<int>(std::min_element(outstanding_.begin(), outstanding_.end()) - outstanding_.begin());
    ++outstanding_[static_cast<size_t>(job.replica)];
    pending_[job.id] = Pending{stream, job.replica, now, now, true};
    prompt_total_ += static_cast<int64_t>(job.prompt.size());
    inbox_.push_back(job);
  }
  work_.notify_one();
  return stream;
}

void Frontend::finish_locked(uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  --outstanding_[static_cast<size_t>(it->second.replica)];
  pending_.erase(it);
}

void Frontend::cancel(const std::vector<ServeJob>& jobs) {
  std::lock_guard lock(mu_);
  for (const ServeJob& job : jobs) {
    if (!pending_.count(job.id)) continue;
    finish_locked(job.id);
    // Not yet sent to the engine: dropped here; else the engine drops it next step.
    auto in = std::find_if(inbox_.begin(), inbox_.end(), [&](const ServeJob& j) { return j.id == job.id; });
    if (in != inbox_.end()) inbox_.erase(in);
    else cancels_.push_back(job.id);
    ++cancelled_total_;
  }
  work_.notify_one();
}

Health Frontend::health() const {
  std::lock_guard lock(mu_);
  return health_;
}

StepPlan Frontend::take_plan(std::chrono::milliseconds idle_wait) {
  std::unique_lock lock(mu_);
  if (pending_.empty() && inbox_.empty() && cancels_.empty() && health_ == Health::ok)
    work_.wait_for(lock, idle_wait, [&] { return !inbox_.empty() || !cancels_.empty() || health_ != Health::ok; });
  StepPlan plan;
  plan.jobs.swap(inbox_);
  plan.cancels.swap(cancels_);
  return plan;
}

void Frontend::deliver(const std::vector<StepReport>& reports) {
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  for (const StepReport& r : reports) {
    status_.at(static_cast<size_t>(r.replica)) = r.status;
    for (const JobEvent& e : r.events) {
      auto it = pending_.find(e.id);
      if (it == pending_.end()) continue;  // cancelled meanwhile
      Pending& p = it->second;
      if (!e.tokens.empty()) {
        const double since = std::chrono::duration<double>(now - (p.first ? p.submitted : p.last)).count();
        if (p.first) ttft_.observe(since);
        else itl_.observe(since / static_cast<double>(e.tokens.size()));
        p.first = false;
        p.last = now;
        generated_total_ += static_cast<int64_t>(e.tokens.size());
        recent_tokens_.push_back({now, static_cast<int64_t>(e.tokens.size())});
      }
      {
        std::lock_guard sl(p.stream->m);
        p.stream->events.push_back(e);
      }
      p.stream->cv.notify_all();
      if (e.done) {
        ++finished_total_;
        if (e.error.empty()) {
          e2e_.observe(std::chrono::duration<double>(now - p.submitted).count());
          if (e.finish_reason == "stop") ++stopped_total_;
          if (e.finish_reason == "length") ++length_total_;
        }
        finish_locked(e.id);
      }
    }
  }
  while (!recent_tokens_.empty() && now - recent_tokens_.front().first > std::chrono::seconds(10)) recent_tokens_.pop_front();
}

void Frontend::drain() {
  std::lock_guard lock(mu_);
  if (health_ == Health::ok) health_ = Health::draining;
  work_.notify_one();
}

bool Frontend::drained() const {
  std::lock_guard lock(mu_);
  return pending_.empty() && inbox_.empty();
}

void Frontend::fail(const std::string& why) {
  std::lock_guard lock(mu_);
  health_ = Health::failed;
  failure_ = why;
  for (auto& [id, p] : pending_) {
    JobEvent e;
    e.id = id;
    e.done = true;
    e.error = why;
    {
      std::lock_guard sl(p.stream->m);
      p.stream->events.push_back(e);
    }
    p.stream->cv.notify_all();
  }
  pending_.clear();
  std::fill(outstanding_.begin(), outstanding_.end(), 0);
}

std::string Frontend::metrics_text(const std::string& model_name) const {
  std::lock_guard lock(mu_);
  ReplicaStatus sum;
  for (const auto& s : status_) {
    sum.running += s.running;
    sum.waiting += s.waiting;
    sum.pages_used += s.pages_used;
    sum.pages_total += s.pages_total;
    sum.preemptions += s.preemptions;
  }
  // Jobs not yet in any replica's report wait too.
  const auto running = static_cast<double>(sum.running);
  const auto waiting = static_cast<double>(std::max<int64_t>(static_cast<int64_t>(pending_.size()) - sum.running, 0));
  const double kv_usage = sum.pages_total > 0 ? static_cast<double>(sum.pages_used) / static_cast<double>(sum.pages_total) : 0;
  const auto prompt_tokens = static_cast<double>(prompt_total_), generated = static_cast<double>(generated_total_);
  double recent = 0;
  for (const auto& [t, n] : recent_tokens_) recent += static_cast<double>(n);
  std::string s;
  // linnet's own names (summed over the replicas).
  s += metric("linnet_requests_running", "gauge", "Jobs (prompt x choice) running in a batch.", running);
  s += metric("linnet_requests_waiting", "gauge", "Jobs queued, not yet running.", waiting);
  s += metric("linnet_kv_pages_used", "gauge", "KV-cache pages in use, all replicas.", static_cast<double>(sum.pages_used));
  s += metric("linnet_kv_pages_total", "gauge", "KV-cache pages, all replicas.", static_cast<double>(sum.pages_total));
  s += metric("linnet_generation_tokens_per_second", "gauge", "Tokens generated per second over the last 10 s.", recent / 10.0);
  s += metric("linnet_generation_tokens_total", "counter", "Tokens generated.", generated);
  s += metric("linnet_prompt_tokens_total", "counter", "Prompt tokens submitted.", prompt_tokens);
  s += metric("linnet_requests_finished_total", "counter", "Jobs finished.", static_cast<double>(finished_total_));
  s += metric("linnet_requests_cancelled_total", "counter", "Jobs cancelled (client gone).", static_cast<double>(cancelled_total_));
  s += metric("linnet_requests_rejected_total", "counter", "Requests refused with 503 (queue full).", static_cast<double>(rejected_total_));
  s += ttft_.text("linnet_time_to_first_token_seconds", "From arrival to the first generated token.");
  s += itl_.text("linnet_inter_token_latency_seconds", "Between generated tokens of one job.");
  // vLLM's names for the same numbers (a request is a job: vLLM runs each of n samples as one),
  // so that dashboards made for vLLM read them; docs/serve.md lists what vLLM has that is not here.
  const std::string model = labels({{"model_name", model_name}});
  auto with_reason = [&](const char* reason) { return labels({{"model_name", model_name}, {"finished_reason", reason}}); };
  s += metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", running, model);
  s += metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", waiting, model);
  s += metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", kv_usage, model);
  s += metric("vllm:gpu_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage (vLLM's older name).",
              kv_usage, model);
  s += metric("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
              static_cast<double>(sum.preemptions), model);
  s += metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", prompt_tokens, model);
  s += metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", generated, model);
  s += family("vllm:request_success_total", "counter", "Count of successfully processed requests.",
              {{with_reason("stop"), static_cast<double>(stopped_total_)},
               {with_reason("length"), static_cast<double>(length_total_)},
               {with_reason("abort"), static_cast<double>(cancelled_total_)}});
  s += ttft_.text("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", model);
  s += itl_.text("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", model);
  s += itl_.text("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds (vLLM's older name).",
                 model);
  s += e2e_.text("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", model);
  return s;
}

}  // namespace linnet::serve
