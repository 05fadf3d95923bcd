// `linnet serve`'s front on world rank 0, between the HTTP threads and the engine loop: the
// HTTP side submits jobs and waits on their events; the engine loop takes each step's plan
// (new jobs spread over the replicas, cancels, shutdown) and delivers what the replicas
// report. Bounded: beyond --max-waiting jobs not yet running, submit answers 503.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serve/metrics.h"
#include "serve/jobs.h"

namespace linnet::serve {

// One HTTP request's events, from all its jobs, in the order they came.
struct RequestStream {
  std::mutex m;
  std::condition_variable cv;
  std::deque<JobEvent> events;
  // Waits up to `timeout` for events; returns them (empty on timeout).
  std::deque<JobEvent> wait(std::chrono::milliseconds timeout);
};

enum class Health { ok, draining, failed };

class Frontend {
 public:
  Frontend(int replicas, int64_t max_waiting);

  // ---- HTTP threads ----
  // Gives the jobs ids and replicas (the one with the fewest jobs outstanding) and queues
  // them; throws ApiError 503 when draining, failed or full.
  std::shared_ptr<RequestStream> submit(std::vector<ServeJob>& jobs);
  // The jobs that have not finished are cancelled (their pages freed in the next step).
  void cancel(const std::vector<ServeJob>& jobs);
  Health health() const;
  // /metrics: linnet's names and, beside them, vLLM's (labelled model_name=`model_name`), so
  // that dashboards made for vLLM read them.
  std::string metrics_text(const std::string& model_name) const;

  // ---- the engine loop ----
  // The next step's plan; waits up to `idle_wait` for work when no job is outstanding.
  StepPlan take_plan(std::chrono::milliseconds idle_wait);
  void deliver(const std::vector<StepReport>& reports);
  // SIGTERM: refuse new work; drained() once every job has finished.
  void drain();
  bool drained() const;
  // The engine failed: /health says so, every waiting request gets `why` as its error.
  void fail(const std::string& why);

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    std::shared_ptr<RequestStream> stream;
    int replica = 0;
    Clock::time_point submitted, last;
    bool first = true;
  };
  void finish_locked(uint64_t id);

  mutable std::mutex mu_;
  std::condition_variable work_;
  std::vector<ServeJob> inbox_;
  std::vector<uint64_t> cancels_;
  std::map<uint64_t, Pending> pending_;
  std::vector<int64_t> outstanding_;  // per replica
  std::vector<ReplicaStatus> status_;
  int64_t max_waiting_;
  uint64_t next_id_ = 1;
  Health health_ = Health::ok;
  std::string failure_;
  // metrics
  Histogram ttft_, itl_, e2e_;
  std::deque<std::pair<Clock::time_point, int64_t>> recent_tokens_;  // last 10 s, for tokens/s
  int64_t generated_total_ = 0, prompt_total_ = 0, finished_total_ = 0, cancelled_total_ = 0, rejected_total_ = 0;
  int64_t stopped_total_ = 0, length_total_ = 0;  // finished jobs by finish_reason ("stop", "length")
};

}  // namespace linnet::serve
