// linnet run-batch: an OpenAI batch file, as vLLM's run-batch reads and writes it, through
// the batch engine (docs/usage.md). Each line {"custom_id", "method": "POST", "url":
// "/v1/completions" | "/v1/chat/completions", "body"} is checked and answered with the body
// `linnet serve` answers (serve/openai_api.h, the same ReplicaEngine), written as
// {"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"} in input
// order, line by line; a line that cannot run is an error line with its custom_id. Replicas
// split the lines and --resume skips the custom_ids already answered (launcher/job_io.h).
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <map>

#include "core/files.h"
#include "engine/request_rules.h"
#include "launcher/job_io.h"
#include "launcher/kv_memory.h"
#include "launcher/model_command.h"
#include "launcher/options.h"
#include "launcher/served_model.h"
#include "serve/openai_api.h"
#include "serve/replica_engine.h"

namespace linnet::cli {

namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;
using serve::ApiError;

// One line of the batch: the request it asks for, or why it cannot run.
struct BatchLine {
  serve::CompletionParams params;
  std::string route;
  int status = 0;  // 0: runs; else the answer's HTTP status
  json error;      // {"message", "type", "param", "code"}
  bool answered = false;  // a request refused as the server refuses it (else: not a request at all)
};

const std::set<std::string> kRoutes = {"/v1/completions", "/v1/chat/completions"};

BatchLine read_line(const InputLine& in, const std::string& where, const Tokenizer& tok, const serve::ServedModel& model) {
  BatchLine b;
  auto refuse = [&](int status, const std::string& message, bool answered, const std::string& param = "") {
    b.status = status;
    b.error = ApiError(status, message, param).body()["error"];
    b.answered = answered;
    return b;
  };
  if (!in.error.empty()) return refuse(400, in.error, false);
  const json& j = in.value;
  for (const char* key : {"method", "url", "body"})
    if (!j.contains(key)) return refuse(400, str(where, ": \"", key, "\" is required"), false);
  if (j["method"] != "POST")
    return refuse(400, str(where, ": \"method\" must be \"POST\", got ", serve::dump(j["method"])), false);
  if (!j["url"].is_string() || !kRoutes.count(j["url"].get<std::string>()))
    return refuse(400, str(where, ": \"url\" must be \"/v1/completions\" or \"/v1/chat/completions\", got ",
                           serve::dump(j["url"])), false);
  b.route = j["url"].get<std::string>();
  const json& body = j["body"];
  if (!body.is_object()) return refuse(400, str(where, ": \"body\" must be a JSON object (the request's body)"), false);
  try {
    if (body.contains("stream") && body["stream"] == true)
      throw ApiError(400, "`stream` is not available in a batch file: each line is answered with one body", "stream");
    // The body with its keys as written, for what a chat template reads.
    const ojson ordered = body.contains("messages") ? parse_ordered_json(in.text, where)["body"] : ojson();
    b.params = serve::parse_request(b.route, body, ordered, tok, model);
  } catch (const ApiError& e) {
    return refuse(e.status(), e.what(), true, e.param());
  } catch (const std::exception& e) {  // e.g. the tokenizer refusing a text, as the server answers it
    return refuse(400, e.what(), true, "prompt");
  }
  return b;
}

ojson error_line(const InputLine& in, const BatchLine& b) {
  ojson response = nullptr;
  if (b.answered)
    response = ojson{{"status_code", b.status}, {"request_id", str("batch-req-", in.line)}, {"body", {{"error", b.error}}}};
  return ojson{{"id", str("batch-", in.line)}, {"custom_id", in.id}, {"response", response}, {"error", b.error}};
}

}  // namespace

int cmd_run_batch(const Args& args) {
  po::options_description desc("linnet run-batch");
  desc.add_options()
      ("input-file,i", po::value<std::string>()->required(),
       "IN.jsonl: one {\"custom_id\", \"method\": \"POST\", \"url\", \"body\"} per line (an OpenAI batch file)")
      ("output-file,o", po::value<std::string>()->required(),
       "OUT.jsonl: one {\"id\", \"custom_id\", \"response\", \"error\"} per line, in input order")
      ("checkpoint", po::value<std::string>()->required(), "Hugging Face checkpoint directory (with its tokenizer)");
  add_engine_options(desc);
  add_served_model_option(desc);
  add_output_options(desc);
  add_progress_option(desc);
  add_bos_option(desc);
  add_chat_template_option(desc);
  add_run_options(desc);
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet run-batch")) return 0;
  const EngineOptions engine_options = engine_options_from(vm);
  const engine::SchedulerLimits& limits = engine_options.limits;
  const KvMemory& kv_memory = engine_options.kv_memory;
  ModelCommand cmd = ModelCommand::open(vm, true, true);
  Ranks& ranks = *cmd.ranks;
  const Tokenizer& tok = *cmd.tok;
  const serve::ServedModel served = served_model(vm, cmd);
  const ProgressOutput progress_to = progress_output(vm, ranks);

  // Every line checked as the server checks a request, before the weights load.
  const std::string in_path = vm["input-file"].as<std::string>(), out_path = vm["output-file"].as<std::string>();
  auto lines = read_job_input(in_path, ranks, {"custom_id", "method", "url", "body"}, LineIds{"custom_id", true});
  std::vector<BatchLine> batch(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) batch[i] = read_line(lines[i], str(in_path, ":", lines[i].line), tok, served);
  JobOutput out(out_path, in_path, output_policy(vm), ranks, lines, "custom_id");

  std::vector<int64_t> lengths;
  for (size_t i : out.mine())
    if (batch[i].status == 0)
      for (size_t k = 0; k < batch[i].params.prompts.size(); ++k)
        for (int64_t s = 0; s < batch[i].params.n; ++s)
          lengths.push_back(static_cast<int64_t>(batch[i].params.prompts[k].ids.size()) + batch[i].params.max_tokens[k]);
  if (vm["batch"].defaulted()) cmd.options.batch = pool_batch(cmd.config, cmd.options, ranks, kv_memory, lengths);
  LoadedModel loaded = cmd.load();
  serve::ReplicaEngine engine(*loaded.model, limits, engine::end_of_sequence_ids(cmd.config, tok), tok, ranks.replica());
  spdlog::info("KV pool: {} pages of {} positions; {} requests on this replica", engine.status().pages_total,
               loaded.generics.page_size, out.mine().size());

  // Each request's jobs (prompt × n) queued at once; the engine admits them as pages allow.
  struct Pending {
    std::vector<serve::ChoiceResult> results;
    size_t left = 0;
    int64_t budget = 0, tokens = 0;  // max_tokens of its choices together, and what they made
  };
  std::map<size_t, Pending> pending;
  std::map<uint64_t, std::pair<size_t, size_t>> owner;  // job id → (line, choice)
  serve::StepPlan plan;
  uint64_t next_job = 1;
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  auto answer = [&](size_t i) {
    const BatchLine& b = batch[i];
    const Pending& p = pending.at(i);
    for (const auto& r : p.results)
      if (!r.error.empty()) {
        BatchLine failed = b;
        failed.status = 500;
        failed.error = ApiError(500, r.error).body()["error"];
        failed.answered = true;
        out.put(i, error_line(lines[i], failed));
        return;
      }
    const json body = serve::completion_body(serve::response_id(b.params, lines[i].line), created, served.name, b.params,
                                             p.results, tok);
    out.put(i, ojson{{"id", str("batch-", lines[i].line)},
                     {"custom_id", lines[i].id},
                     {"response", {{"status_code", 200}, {"request_id", str("batch-req-", lines[i].line)}, {"body", body}}},
                     {"error", nullptr}});
  };
  int64_t budget = 0;
  for (size_t i : out.mine()) {
    if (batch[i].status != 0) {
      const std::string why = batch[i].error.value("message", std::string());
      out.warn_line(batch[i].answered ? str(in_path, ":", lines[i].line, ": ", why, " (the other lines carry on)")
                                      : str(why, " (the other lines carry on)"));
      out.put(i, error_line(lines[i], batch[i]));
      continue;
    }
    // Without a seed, seed 0 (the server draws one): a batch file gives the same answers again.
    std::vector<serve::ServeJob> jobs = serve::jobs_of(batch[i].params, batch[i].params.seeded ? batch[i].params.sampling.seed : 0);
    Pending& p = pending[i];
    p.results.resize(jobs.size());
    p.left = jobs.size();
    for (size_t k = 0; k < jobs.size(); ++k) {
      jobs[k].id = next_job++;
      jobs[k].replica = ranks.replica();
      owner[jobs[k].id] = {i, k};
      plan.jobs.push_back(std::move(jobs[k]));
    }
    for (int64_t m : batch[i].params.max_tokens) p.budget += m * batch[i].params.n;
    budget += p.budget;
  }
  engine.apply(plan);
  Progress progress("run-batch", "requests", out.mine().size(), budget, progress_to);
  for (size_t k = pending.size(); k < out.mine().size(); ++k) progress.finished(0, 0);  // error lines
  int64_t generated = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (!engine.idle()) {
    for (const serve::JobEvent& e : engine.step().events) {
      const auto [i, k] = owner.at(e.id);
      Pending& p = pending.at(i);
      generated += static_cast<int64_t>(e.tokens.size());
      p.tokens += static_cast<int64_t>(e.tokens.size());
      if (serve::apply_event(p.results[k], e) && --p.left == 0) {
        answer(i);
        progress.finished(p.budget, p.tokens);
        pending.erase(i);
      }
    }
    progress.update(generated);
  }
  progress.end();
  LINNET_CHECK(pending.empty(), "run-batch: ", pending.size(), " request(s) left unanswered by an idle engine");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.finish();
  int64_t errors = 0;
  if (ranks.world_rank() == 0) {
    int64_t n = 0, prompt_tokens = 0, completion_tokens = 0;
    std::FILE* summary = out.summary_stream();
    for (const json& r : out.results_of_this_run()) {
      if (r.contains("error") && !r["error"].is_null()) {
        ++errors;
        continue;
      }
      ++n;
      const json usage = r["response"]["body"].value("usage", json::object());
      prompt_tokens += usage.value("prompt_tokens", int64_t{0});
      completion_tokens += usage.value("completion_tokens", int64_t{0});
    }
    std::fprintf(summary, "run-batch: %lld requests answered (%lld errors, %zu already done), %lld prompt tokens, %lld generated "
                "in %.2f s: %.1f tok/s generated\n",
                static_cast<long long>(n), static_cast<long long>(errors), out.skipped_done(),
                static_cast<long long>(prompt_tokens), static_cast<long long>(completion_tokens), seconds,
                seconds > 0 ? static_cast<double>(completion_tokens) / seconds : 0.0);
    if (errors) spdlog::error("{} of the requests ended in an error (their lines in {} say why); exit code {}", errors,
                              out_path, kExitSomeLinesFailed);
  }
  return errors ? kExitSomeLinesFailed : 0;
}

}  // namespace linnet::cli
