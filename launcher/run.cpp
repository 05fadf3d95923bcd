// linnet run: call a sequence of entries on one loaded model (see docs/cli.md for the
// CALLS.json format). Every rank runs the same calls; rank 0 writes the outputs.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_weights.h"
#include "checkpoint/safetensors.h"
#include "launcher/options.h"
#include "launcher/ranks.h"

namespace linnet::cli {

namespace {

using nlohmann::json;

struct Call {
  std::string entry;
  EntryArgs args;
  std::map<std::string, int64_t> generics;
  std::vector<std::string> outputs;
};

// A JSON array (nested to the arg's rank) as a tensor of the arg's dtype.
Tensor inline_tensor(const json& v, const card::Arg& arg, DType t, const std::string& where) {
  std::vector<int64_t> dims;
  const json* cur = &v;
  while (cur->is_array()) {
    dims.push_back(static_cast<int64_t>(cur->size()));
    if (cur->empty()) break;
    cur = &(*cur)[0];
  }
  std::vector<double> flat;
  std::function<void(const json&, size_t)> walk = [&](const json& x, size_t depth) {
    if (depth == dims.size()) {
      if (!x.is_number()) throw Error(str(where, ": expected a number, got ", x.dump()));
      flat.push_back(x.get<double>());
      return;
    }
    if (!x.is_array() || static_cast<int64_t>(x.size()) != dims[depth])
      throw Error(str(where, ": ragged array (every row needs ", dims[depth], " elements)"));
    for (const auto& e : x) walk(e, depth + 1);
  };
  walk(v, 0);
  const DType dt = parse_dtype(arg.dtype == "T" ? dtype_name(t) : arg.dtype);
  if (is_float(dt)) return Tensor::from_floats(Shape(dims), std::vector<float>(flat.begin(), flat.end()), dt);
  return Tensor::from_ints(Shape(dims), std::vector<int64_t>(flat.begin(), flat.end()), dt);
}

std::vector<Call> read_calls(const std::string& path, const std::map<std::string, Tensor>& inputs, DType t) {
  std::ifstream in(path);
  if (!in) throw Error(str(path, ": cannot open the calls file"));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(str(path, ": malformed JSON: ", e.what()));
  }
  if (!j.is_array()) throw Error(str(path, ": expected a list of calls"));
  std::vector<Call> calls;
  for (size_t i = 0; i < j.size(); ++i) {
    const json& c = j[i];
    const std::string where = str(path, ": call ", i);
    if (!c.is_object() || !c.contains("entry") || !c["entry"].is_string())
      throw Error(str(where, ": needs \"entry\": \"<name>\""));
    Call call;
    call.entry = c["entry"].get<std::string>();
    const card::Function& f = card::entry(call.entry);
    const json args = c.value("args", json::object());
    if (!args.is_object()) throw Error(str(where, ": \"args\" must be an object"));
    for (const auto& [name, v] : args.items()) {
      const card::Arg* arg = nullptr;
      for (const auto& a : f.args)
        if (a.name == name) arg = &a;
      if (!arg)
        throw Error(str(where, ": ", call.entry, " has no argument '", name, "' (signature: ", card::format_signature(f), ")"));
      if (v.is_string()) {
        auto it = inputs.find(v.get<std::string>());
        if (it == inputs.end()) throw Error(str(where, ": input tensor '", v.get<std::string>(), "' is not in --inputs"));
        call.args[name] = it->second;
      } else if (v.is_array() || v.is_number()) {  // a scalar, or a small tensor written inline
        call.args[name] = inline_tensor(v, *arg, t, where + " " + name);
      } else {
        throw Error(str(where, ": argument '", name, "' must name an input tensor, or be a number or an array"));
      }
    }
    const json generics = c.value("generics", json::object());
    if (!generics.is_object()) throw Error(str(where, ": \"generics\" must be an object"));
    for (const auto& [name, v] : generics.items()) {
      if (!v.is_number_integer()) throw Error(str(where, ": generic ", name, " must be an integer"));
      call.generics[name] = v.get<int64_t>();
    }
    for (const auto& o : c.value("outputs", json::array())) {
      if (!o.is_string()) throw Error(str(where, ": outputs must be names"));
      call.outputs.push_back(o.get<std::string>());
    }
    if (!call.outputs.empty() && call.outputs.size() != f.results.size())
      throw Error(str(where, ": ", call.entry, " returns ", f.results.size(), " result(s), but ", call.outputs.size(),
                      " output name(s) were given"));
    calls.push_back(std::move(call));
  }
  return calls;
}

void print_output(const std::string& name, const Tensor& t) {
  std::printf("%s %s\n", name.c_str(), t.describe().c_str());
  if (is_float(t.dtype())) {
    const auto v = t.to_floats();
    const size_t show = std::min<size_t>(v.size(), 8);
    for (size_t i = 0; i < show; ++i) std::printf("%s%.6g", i ? " " : "", v[i]);
    std::printf(v.size() > show ? " …\n" : "\n");
    return;
  }
  const auto v = t.to_ints();
  const int64_t cols = t.rank() ? t.dim(t.rank() - 1) : 1;
  for (size_t i = 0; i < v.size(); ++i)
    std::printf("%lld%s", static_cast<long long>(v[i]), (i + 1) % cols == 0 ? "\n" : " ");
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
  if (!parse(args, desc, vm,
             "linnet run --checkpoint DIR --calls CALLS.json [--inputs IN.safetensors] [--outputs OUT.safetensors] "
             "[--batch B] [--max-seq S] [--page-size P] [--dtype T] [--backend cpu|cuda] [--tp K]"))
    return 0;
  Ranks ranks(vm["tp"].as<int>(), vm["backend"].as<std::string>());
  RunOptions options = run_options(vm);
  if (!vm.count("shards")) options.shards = ranks.shards().size();

  LoadedModel loaded = load_model(vm["checkpoint"].as<std::string>(), options, ranks.backend(), ranks.shards());
  std::map<std::string, Tensor> inputs;
  if (vm.count("inputs")) inputs = ranks.read_inputs(ranks.replica_path(vm["inputs"].as<std::string>()));
  const auto calls = read_calls(vm["calls"].as<std::string>(), inputs, loaded.generics.t);

  std::vector<std::pair<std::string, Tensor>> outputs;
  for (const auto& call : calls) {
    std::vector<Tensor> results = loaded.model->call(call.entry, call.args, call.generics);
    for (size_t i = 0; i < call.outputs.size(); ++i) outputs.emplace_back(call.outputs[i], results[i]);
    spdlog::info("{}: done", call.entry);
  }
  if (vm.count("print") && ranks.world_rank() == 0)
    for (const auto& [name, t] : outputs) print_output(name, t);
  if (vm.count("outputs")) {
    ranks.set_outputs_pattern(vm["outputs"].as<std::string>());
    ranks.write_outputs(ranks.replica_path(vm["outputs"].as<std::string>()), outputs);
  }
  return 0;
}

}  // namespace linnet::cli
