// linnet bench-sweep: several `linnet bench` / `linnet bench-engine` configurations in one
// process, one after another, from a JSON plan — each with its own environment (the CUDA
// backend's switches: docs/gpu.md) and its own report, written as <out>/<label>.json with the
// label, the command, the arguments and the environment inside, the moment it is done. With
// random weights on a GPU the matrices are made once, on the device, and every configuration
// after the first reuses them (RandomWeights::keep_device_matrices): scripts/gpu-check gets
// all its figures from one loaded model in the first minutes of a GPU run.
//
//   plan: [{"label": "8192", "command": "bench", "args": ["--config", "llama-3-8b", …],
//           "env": {"LINNET_CUDA_GRAPHS": "0"}}, …]
//
// A configuration that fails (an error, not a crash) gets <label>.json with "status": "error"
// and the message, and the next one runs. Progress goes to stdout as "bench-sweep: begin
// LABEL" and "bench-sweep: end LABEL ok|error" lines, so a reader of a killed run's log knows
// which configuration was running; its numbers are only ever those of its own JSON.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "checkpoint/random_weights.h"
#include "core/files.h"
#include "launcher/options.h"

namespace linnet::cli {

namespace {

struct Config {
  std::string label, command;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
};

std::vector<Config> read_plan(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path, "the sweep plan"));
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(str("bench-sweep: ", path, " is not JSON: ", e.what()));
  }
  if (!j.is_array()) throw UsageError(str("bench-sweep: ", path, " should hold a JSON list of configurations"));
  std::vector<Config> plan;
  std::set<std::string> labels;
  for (const auto& e : j) {
    Config c;
    if (!e.is_object() || !e.contains("label") || !e["label"].is_string() || !e.contains("args") || !e["args"].is_array())
      throw UsageError(str("bench-sweep: each configuration needs a \"label\" and \"args\": ", e.dump()));
    c.label = e["label"].get<std::string>();
    if (c.label.empty() || c.label.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
                               std::string::npos)
      throw UsageError(str("bench-sweep: label \"", c.label, "\" should be letters, digits, '.', '_' and '-' (a file name)"));
    if (!labels.insert(c.label).second) throw UsageError(str("bench-sweep: label \"", c.label, "\" appears twice"));
    c.command = e.value("command", std::string("bench"));
    if (c.command != "bench" && c.command != "bench-engine")
      throw UsageError(str("bench-sweep: ", c.label, ": command \"", c.command, "\" should be bench or bench-engine"));
    for (const auto& a : e["args"]) {
      if (!a.is_string()) throw UsageError(str("bench-sweep: ", c.label, ": arguments should be strings"));
      c.args.push_back(a.get<std::string>());
      if (c.args.back() == "--json") throw UsageError(str("bench-sweep: ", c.label, ": --json is the sweep's to give"));
    }
    if (e.contains("env")) {
      if (!e["env"].is_object()) throw UsageError(str("bench-sweep: ", c.label, ": \"env\" should be an object"));
      for (const auto& [k, v] : e["env"].items()) {
        if (!v.is_string()) throw UsageError(str("bench-sweep: ", c.label, ": env ", k, " should be a string"));
        c.env[k] = v.get<std::string>();
      }
    }
    plan.push_back(std::move(c));
  }
  return plan;
}

std::set<std::string> label_list(const po::variables_map& vm, const char* name) {
  std::set<std::string> out;
  if (!vm.count(name)) return out;
  std::string s = vm[name].as<std::string>();
  for (size_t at = 0; at <= s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    if (comma > at) out.insert(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// Sets the configuration's variables; the destructor puts the earlier values back.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& env) {
    for (const auto& [k, v] : env) {
      const char* old = std::getenv(k.c_str());
      saved_.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
      ::setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace

int cmd_bench_sweep(const Args& args) {
  po::options_description desc("linnet bench-sweep");
  desc.add_options()
      ("plan", po::value<std::string>()->required(), "a JSON list of {label, command (bench|bench-engine), args, env}")
      ("out", po::value<std::string>()->required(), "the folder for <label>.json")
      ("only", po::value<std::string>(), "run only these labels (comma-separated)")
      ("skip", po::value<std::string>(), "leave out these labels (comma-separated)");
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet bench-sweep")) return 0;
  const std::vector<Config> plan = read_plan(vm["plan"].as<std::string>());
  const std::set<std::string> only = label_list(vm, "only"), skip = label_list(vm, "skip");
  for (const auto& l : only)
    if (std::none_of(plan.begin(), plan.end(), [&](const Config& c) { return c.label == l; }))
      throw UsageError(str("bench-sweep: --only ", l, ": no such label in the plan"));
  const std::filesystem::path out = vm["out"].as<std::string>();
  std::filesystem::create_directories(out);

  RandomWeights::keep_device_matrices(true);
  int failed = 0, ran = 0;
  const size_t total = plan.size();
  for (size_t i = 0; i < total; ++i) {
    const Config& c = plan[i];
    if ((!only.empty() && !only.count(c.label)) || skip.count(c.label)) continue;
    const std::filesystem::path partial = out / (c.label + ".partial.json"), final_json = out / (c.label + ".json");
    std::filesystem::remove(partial);
    std::filesystem::remove(final_json);
    std::printf("bench-sweep: begin %s (%zu of %zu): linnet %s", c.label.c_str(), i + 1, total, c.command.c_str());
    for (const auto& a : c.args) std::printf(" %s", a.c_str());
    for (const auto& [k, v] : c.env) std::printf(" [%s=%s]", k.c_str(), v.c_str());
    std::printf("\n");
    std::fflush(stdout);
    std::vector<std::string> a = c.args;
    a.push_back("--json");
    a.push_back(partial.string());
    const auto t0 = std::chrono::steady_clock::now();
    int rc = 0;
    std::string error;
    {
      ScopedEnv env(c.env);
      try {
        rc = c.command == "bench" ? cmd_bench(a) : cmd_bench_engine(a);
      } catch (const UsageError& e) {
        rc = 2;
        error = e.what();
      } catch (const std::exception& e) {
        rc = 1;
        error = e.what();
      }
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    nlohmann::json report;
    if (rc == 0 && std::filesystem::exists(partial)) {
      report = nlohmann::json::parse(read_text_file(partial.string(), "a bench report"));
      report["status"] = "ok";
    } else {
      if (error.empty()) error = str("exit code ", rc, rc == 0 ? " and no report" : "");
      report = {{"status", "error"}, {"error", error}, {"exit_code", rc}};
    }
    report["label"] = c.label;
    report["command"] = c.command;
    report["args"] = c.args;
    report["env"] = c.env;
    report["wall_s"] = wall;
    write_text_file(final_json.string(), report.dump(2) + "\n", "a bench-sweep report");
    std::filesystem::remove(partial);
    ++ran;
    if (report["status"] != "ok") {
      ++failed;
      spdlog::error("bench-sweep: {} failed: {}", c.label, error);
    }
    std::printf("bench-sweep: end %s %s (%.1f s)\n", c.label.c_str(), report["status"] == "ok" ? "ok" : "error", wall);
    std::fflush(stdout);
  }
  RandomWeights::keep_device_matrices(false);
  std::printf("bench-sweep: %d configuration(s) run, %d failed\n", ran, failed);
  return failed ? 1 : 0;
}

}  // namespace linnet::cli
