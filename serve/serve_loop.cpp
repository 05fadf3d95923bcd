#include "serve/serve_loop.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "serve/access.h"
#include "serve/frontend.h"

namespace linnet::serve {

namespace {

std::atomic<bool> g_terminate{false};
extern "C" void on_terminate(int) { g_terminate = true; }

// One step's plan, the same on every rank.
StepPlan share_plan(const ServeRanks& ranks, StepPlan plan) {
  if (ranks.world_size == 1) return plan;
  std::string text = ranks.world_rank == 0 ? dump(to_json(plan)) : std::string();
  ranks.world->broadcast(text);
  return ranks.world_rank == 0 ? plan : plan_from_json(nlohmann::json::parse(text));
}

// Every replica's report, on world rank 0.
std::vector<StepReport> gather_reports(const ServeRanks& ranks, StepReport mine) {
  if (ranks.world_size == 1) return {std::move(mine)};
  std::vector<StepReport> out;
  for (const std::string& s : ranks.world->gather(ranks.replica_leader ? dump(to_json(mine)) : std::string()))
    if (!s.empty()) out.push_back(report_from_json(nlohmann::json::parse(s)));
  return out;
}

// Says at start whether a key guards the API, and warns when a server without one listens
// beyond this host.
void log_access(const AccessOptions& a, const std::string& host, bool key_from_option) {
  if (!a.api_keys.empty()) {
    spdlog::info("serve: /v1/* requires an API key ({} key(s) from {}; sent as \"Authorization: Bearer KEY\"); "
                 "/health, /metrics, /tokenize and /detokenize are open",
                 a.api_keys.size(), key_from_option ? "--api-key" : "LINNET_API_KEY");
  } else if (is_loopback(host)) {
    spdlog::info("serve: no API key (--api-key or LINNET_API_KEY): any client on this host may use the model");
  } else {
    spdlog::warn("serve: --host {} is not a loopback address and there is no API key: whoever reaches the port can use "
                 "the model; set LINNET_API_KEY or --api-key (docs/cluster.md)",
                 host);
  }
  if (!a.allowed_origins.empty()) {
    std::string origins;
    for (const std::string& o : a.allowed_origins) origins += (origins.empty() ? "" : " ") + o;
    spdlog::info("serve: CORS: browsers at {} may call the API{}", origins,
                 a.allow_credentials ? " (with credentials)" : "");
  }
}

}  // namespace

void serve_until_drained(ReplicaEngine& engine, const Tokenizer& tok, const ServedModel& served,
                         const ServeOptions& options, const ServeRanks& ranks) {
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-answer is a failed write, not the end
  std::signal(SIGTERM, on_terminate);
  std::signal(SIGINT, on_terminate);
  const HttpOptions& http_options = options.http;
  const bool root = ranks.world_rank == 0;
  std::unique_ptr<Frontend> front;
  std::unique_ptr<HttpServer> http;
  if (root) {
    log_access(http_options.access, http_options.host, options.key_from_option);
    front = std::make_unique<Frontend>(ranks.replicas, options.max_waiting);
    http = std::make_unique<HttpServer>(*front, tok, served, http_options);
    const int port = http->start();
    const std::string stages = options.stages > 1 ? str(" x ", options.stages, " pipeline stages") : std::string();
    std::printf("linnet serve: listening on http://%s:%d (model %s: %d replica(s)%s x Shards %lld, KV pool %lld pages of "
                "%lld positions each, MaxSeq %lld)\n",
                http_options.host.c_str(), port, served.name.c_str(), ranks.replicas, stages.c_str(),
                static_cast<long long>(options.shards), static_cast<long long>(served.pages),
                static_cast<long long>(served.page_size), static_cast<long long>(served.max_seq));
    std::fflush(stdout);
  }
  try {
    for (;;) {
      StepPlan plan;
      if (root) {
        if (g_terminate && front->health() == Health::ok) {
          spdlog::info("serve: SIGTERM, finishing the requests in progress (new ones get 503)");
          front->drain();
        }
        plan = front->take_plan(std::chrono::milliseconds(50));
        plan.shutdown = front->health() == Health::draining && front->drained();
      }
      plan = share_plan(ranks, std::move(plan));
      engine.apply(plan);
      if (plan.shutdown) break;
      std::vector<StepReport> reports = gather_reports(ranks, engine.step());
      if (root) front->deliver(reports);
    }
  } catch (const std::exception& e) {
    if (root) {
      front->fail(e.what());  // /health says so; waiting clients get the error
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      http->stop();
    }
    throw;
  }
  if (root) {
    http->stop();
    spdlog::info("serve: drained, exiting");
  }
}

}  // namespace linnet::serve
