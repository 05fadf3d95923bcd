// linnet run: call a sequence of entries on one loaded model (see docs/cli.md for the
// CALLS.json format). Every rank runs the same calls; rank 0 writes the outputs. Everything
// that can be checked without the weights (config, calls, inputs, the output path) is checked
// before they load.
#include <spdlog/spdlog.h>

#include <cstdio>

#include "runtime/loader.h"
#include "launcher/calls.h"
#include "launcher/options.h"
#include "launcher/model_command.h"
#include "launcher/run_io.h"

namespace linnet::cli {

namespace {

// Each named output, integer tensors in full (one row a line), floats' first 8 values.
std::string format_outputs(const std::vector<std::pair<std::string, Tensor>>& outputs) {
  std::string s;
  for (const auto& [name, t] : outputs) {
    s += name + " " + t.describe() + "\n";
    if (is_float(t.dtype())) {
      const auto v = t.to_floats();
      const size_t show = std::min<size_t>(v.size(), 8);
      char buf[32];
      for (size_t i = 0; i < show; ++i) {
        std::snprintf(buf, sizeof buf, "%s%.6g", i ? " " : "", v[i]);
        s += buf;
      }
      s += v.size() > show ? " …\n" : "\n";
      continue;
    }
    const auto v = t.to_ints();
    const int64_t cols = t.rank() ? t.dim(t.rank() - 1) : 1;
    for (size_t i = 0; i < v.size(); ++i) s += std::to_string(v[i]) + ((i + 1) % cols == 0 ? "\n" : " ");
  }
  return s;
}

}  // namespace

int cmd_run(const Args& args) {
  po::options_description desc("linnet run");
  desc.add_options()
      ("checkpoint", po::value<std::string>()->required(), "Hugging Face checkpoint directory")
      ("calls", po::value<std::string>()->required(), "CALLS.json: the entries to call, in order")
      ("inputs", po::value<std::string>(), "IN.safetensors: tensors the calls name ({replica} is replaced)")
      ("outputs", po::value<std::string>(), "OUT.safetensors: the calls' named results ({replica} is replaced)")
      ("backend", po::value<std::string>()->default_value("auto"), "cpu, cuda or auto")
      ("tp", po::value<int>()->default_value(0), "ranks per model replica (default: all ranks)")
      ("print", "print each named output on stdout (rank 0): integer tensors in full, one row a line");
  add_run_options(desc);
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet run"))
    return 0;
  ModelCommand cmd = ModelCommand::open(vm, false);
  Ranks& ranks = *cmd.ranks;

  // Before the weights: the config's refusals and generics, the calls against the card,
  // the inputs, and whether the outputs can be written.
  const Generics g = bind_generics(cmd.config, with_shards(cmd.options, ranks.shards()));
  std::map<std::string, Tensor> inputs;
  if (vm.count("inputs")) inputs = read_inputs(ranks, replica_path(ranks, vm["inputs"].as<std::string>()));
  const auto calls = read_calls(vm["calls"].as<std::string>(), inputs, g);
  const std::string out_pattern = vm.count("outputs") ? vm["outputs"].as<std::string>() : "";
  const std::string out_path = replica_path(ranks, out_pattern);
  if (!out_path.empty()) check_writable(ranks, out_path, out_pattern);

  LoadedModel loaded = cmd.load();
  std::vector<std::pair<std::string, Tensor>> outputs;
  for (size_t c = 0; c < calls.size(); ++c) {
    const auto& call = calls[c];
    std::vector<Tensor> results;
    try {
      results = loaded.model->call(call.entry, call.args, call.generics);
    } catch (const Error& e) {  // what the model refused (a row's state, a position): which call
      throw Error(str(vm["calls"].as<std::string>(), ": call ", c, " (", call.entry, "): ", e.what()));
    }
    for (size_t i = 0; i < call.outputs.size(); ++i) outputs.emplace_back(call.outputs[i], results[i]);
    spdlog::info("{}: done", call.entry);
  }
  if (vm.count("print") && ranks.world_rank() == 0) {
    const std::string text = format_outputs(outputs);  // one write: never split by other output
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }
  if (!out_path.empty()) write_outputs(ranks, out_path, out_pattern, outputs);
  return 0;
}

}  // namespace linnet::cli
