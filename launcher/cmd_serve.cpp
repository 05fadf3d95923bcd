// linnet serve: an OpenAI-compatible HTTP server on the batch engine (docs/serve.md). Here its
// options, the ranks and the model; the server's loop is serve/serve_loop.h.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "launcher/kv_memory.h"
#include "launcher/options.h"
#include "launcher/model_command.h"
#include "launcher/served_model.h"
#include "engine/request_rules.h"
#include "serve/replica_engine.h"
#include "serve/http.h"
#include "serve/serve_loop.h"

namespace linnet::cli {

using namespace linnet::serve;

namespace {

// A list option: a JSON list of strings (vLLM takes --allowed-origins '["*"]') or one value.
std::vector<std::string> list_option(const po::variables_map& vm, const char* name) {
  const std::string text = vm[name].as<std::string>();
  if (text.empty()) throw UsageError(str("--", name, " is empty (give a JSON list such as '[\"*\"]', or one value)"));
  if (text.front() != '[') return {text};
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_array() || !std::all_of(j.begin(), j.end(), [](const nlohmann::json& v) { return v.is_string(); }))
    throw UsageError(str("--", name, " must be a JSON list of strings (e.g. '[\"*\"]') or one value, got ", text));
  return j.get<std::vector<std::string>>();
}

// Who may use the server: the keys (--api-key, else LINNET_API_KEY) and CORS.
AccessOptions access_options(const po::variables_map& vm) {
  AccessOptions a;
  if (vm.count("api-key")) {
    a.api_keys = vm["api-key"].as<std::vector<std::string>>();
    for (const std::string& key : a.api_keys)
      if (key.empty()) throw UsageError("--api-key is empty (an unset variable?); give the key, or leave the option out");
  } else if (const char* env = std::getenv("LINNET_API_KEY"); env && *env) {
    a.api_keys = {env};
  }
  if (vm.count("allowed-origins")) a.allowed_origins = list_option(vm, "allowed-origins");
  a.allowed_methods = list_option(vm, "allowed-methods");
  a.allowed_headers = list_option(vm, "allowed-headers");
  a.allow_credentials = vm["allow-credentials"].as<bool>();
  if (a.allowed_origins.empty())
    for (const char* name : {"allowed-methods", "allowed-headers", "allow-credentials"})
      if (!vm[name].defaulted()) throw UsageError(str("--", name, " does nothing without --allowed-origins"));
  return a;
}

}  // namespace

int cmd_serve(const Args& args) {
  po::options_description desc("linnet serve");
  desc.add_options()
      ("checkpoint", po::value<std::string>()->required(), "Hugging Face checkpoint directory (with its tokenizer)")
      ("host", po::value<std::string>()->default_value("127.0.0.1"), "address to listen on (0.0.0.0: every interface)")
      ("port", po::value<int>()->default_value(8000), "TCP port (0: any free one; the chosen one is printed)")
      ("max-waiting", po::value<int64_t>()->default_value(1024), "jobs (prompt × n) queued beyond those running; more: 503")
      ("max-body", po::value<int64_t>()->default_value(16 << 20), "bytes of a request body; more: 413")
      ("http-threads", po::value<int64_t>()->default_value(1024),
       "requests handled at once (a connection sending its request, or idle, takes no thread)")
      ("http-max-connections", po::value<int64_t>()->default_value(4096), "connections open at once; more: 503")
      ("http-timeout", po::value<double>()->default_value(30),
       "seconds a request may take to arrive whole, and each write of an answer may wait")
      ("http-idle-timeout", po::value<double>()->default_value(5), "seconds an idle keep-alive connection stays open")
      ("api-key", po::value<std::vector<std::string>>()->multitoken(),
       "key(s) a client must send on /v1/* as \"Authorization: Bearer KEY\" (default: LINNET_API_KEY, else none)")
      ("allowed-origins", po::value<std::string>(),
       "CORS: origins whose pages may call the API, a JSON list ('[\"https://a.example\"]', '[\"*\"]') or one (default: none)")
      ("allowed-methods", po::value<std::string>()->default_value("[\"*\"]"), "CORS: methods a preflight allows")
      ("allowed-headers", po::value<std::string>()->default_value("[\"*\"]"), "CORS: request headers a preflight allows")
      ("allow-credentials", po::bool_switch(), "CORS: let browsers send cookies and credentials");
  add_engine_options(desc);
  add_served_model_option(desc);
  add_bos_option(desc);
  add_chat_template_option(desc);
  add_run_options(desc);
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet serve"))
    return 0;
  const EngineOptions engine_options = engine_options_from(vm);
  const engine::SchedulerLimits& limits = engine_options.limits;
  ServeOptions serve_options;
  serve_options.max_waiting = positive_option(vm, "max-waiting");
  serve_options.key_from_option = vm.count("api-key") > 0;
  HttpOptions& http_options = serve_options.http;
  http_options.host = vm["host"].as<std::string>();
  http_options.port = vm["port"].as<int>();
  if (http_options.port < 0 || http_options.port > 65535) throw UsageError("--port must be in [0, 65535]");
  http_options.max_body = static_cast<size_t>(positive_option(vm, "max-body"));
  http_options.threads = static_cast<size_t>(positive_option(vm, "http-threads"));
  http_options.max_connections = static_cast<size_t>(positive_option(vm, "http-max-connections"));
  for (const char* name : {"http-timeout", "http-idle-timeout"}) {
    const double s = vm[name].as<double>();
    if (!(s >= 0.01 && s <= 86400)) throw UsageError(str("--", name, " must be in [0.01, 86400] seconds, got ", s));
  }
  http_options.request_timeout = http_options.io_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(vm["http-timeout"].as<double>() * 1000));
  http_options.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(vm["http-idle-timeout"].as<double>() * 1000));
  http_options.access = access_options(vm);
  const KvMemory& kv_memory = engine_options.kv_memory;
  ModelCommand cmd = ModelCommand::open(vm, true, true);
  Ranks& ranks = *cmd.ranks;
  const ModelConfig& config = cmd.config;
  const Tokenizer* tok = cmd.tok.get();
  if (vm["batch"].defaulted())
    cmd.options.batch = pool_batch(config, cmd.options, ranks, kv_memory,
                                   std::vector<int64_t>(static_cast<size_t>(limits.max_rows), cmd.max_seq()));
  LoadedModel loaded = cmd.load();
  ReplicaEngine engine(*loaded.model, limits, engine::end_of_sequence_ids(config, *tok), *tok, ranks.replica());
  const ReplicaStatus pool = engine.status();

  ServedModel served = served_model(vm, cmd);
  served.max_seq = loaded.generics.max_seq;
  served.pages = pool.pages_total;
  served.page_size = loaded.generics.page_size;

  serve_options.shards = loaded.generics.shards;
  serve_options.stages = ranks.stages();
  const ServeRanks serve_ranks{&ranks.world(), ranks.world_rank(), ranks.world_size(), ranks.leads_replica(),
                               ranks.replicas()};
  serve_until_drained(engine, *tok, served, serve_options, serve_ranks);
  return 0;
}

}  // namespace linnet::cli
