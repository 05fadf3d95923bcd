#include "launcher/options.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sched.h>
#include <typeinfo>
#include <vector>
#include <algorithm>
#include <cctype>
#include <map>
#include <filesystem>

namespace linnet::cli {

namespace {

// Levenshtein distance of two option names (short: a plain table).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string nearest_option_hint(const std::string& given, const po::options_description& desc) {
  std::string name = given;
  while (!name.empty() && name[0] == '-') name.erase(0, 1);
  if (const size_t eq = name.find('='); eq != std::string::npos) name.resize(eq);
  auto words = [](const std::string& s) {
    std::vector<std::string> w;
    for (size_t at = 0; at <= s.size();) {
      const size_t dash = std::min(s.find('-', at), s.size());
      if (dash > at) w.push_back(s.substr(at, dash - at));
      at = dash + 1;
    }
    return w;
  };
  const auto mine = words(name);
  // Best: an option holding every word given (--max-tokens → --max-new-tokens), then the
  // closest spelling (--temprature → --temperature).
  std::pair<int, size_t> best{2, 0};
  std::string found;
  for (const auto& o : desc.options()) {
    const std::string candidate = o->long_name();
    if (candidate.empty()) continue;
    const auto theirs = words(candidate);
    bool all = !mine.empty();
    for (const auto& w : mine) all = all && std::find(theirs.begin(), theirs.end(), w) != theirs.end();
    const std::pair<int, size_t> score{all ? 0 : 1, edit_distance(name, candidate)};
    if (score < best) best = score, found = candidate;
  }
  if (found.empty() || (best.first == 1 && best.second > std::max<size_t>(2, name.size() / 3))) return "";
  return str("; did you mean --", found, "?");
}

namespace {

// --log-level and --quiet; ranks other than 0 log warnings and errors only unless asked,
// so that their lines do not drown rank 0's.
void apply_logging(const po::variables_map& vm) {
  if (vm.count("log-level")) {
    const std::string name = vm["log-level"].as<std::string>();
    const auto level = spdlog::level::from_str(name);
    if (level == spdlog::level::off && name != "off")
      throw UsageError(str("--log-level '", name, "': expected trace, debug, info, warn, error or off"));
    spdlog::set_level(level);
  } else if (vm.count("quiet")) {
    spdlog::set_level(spdlog::level::warn);
  }
}

}  // namespace

namespace {

// What stands for an option's value in a usage line: a name for the well-known ones, else
// from its type (N for counts, X for numbers, the option's own name for the rest).
std::string placeholder(const po::option_description& o) {
  static const std::map<std::string, std::string> named = {
      {"checkpoint", "DIR"},        {"out", "DIR"},           {"plan", "PLAN.json"},           {"prompts", "IN.jsonl"},      {"data", "IN.jsonl"},
      {"output", "OUT.jsonl"},      {"calls", "CALLS.json"},  {"inputs", "IN.safetensors"}, {"outputs", "OUT.safetensors"},
      {"json", "FILE"},             {"jsonl", "FILE|-"},      {"bench", "FILE"},            {"input", "MODEL.bin"},
      {"backend", "cpu|cuda|auto"}, {"dtype", "bf16|f16|f32"}, {"on-error", "stop|skip"},   {"add-bos", "auto|yes|no"},
      {"log-level", "LEVEL"},       {"config", "CFG"},        {"preset", "NAME"},           {"kv-cache-memory", "BYTES|FRACTION"},
      {"host", "HOST"},             {"text", "TEXT"},         {"ids", "IDS"},               {"stop", "STR"},
      {"served-model-name", "NAME"}, {"chat-template", "FILE"}, {"messages", "FILE.json"},   {"tools", "FILE.json"},
      {"input-file", "IN.jsonl"},   {"output-file", "OUT.jsonl"}, {"template", "NAME|FILE"},  {"kwargs", "JSON"},
      {"moe-sharding", "expert|tensor"}, {"kv-cache-dtype", "auto|bf16|f16|fp8|f32"}, {"api-key", "KEY"},   {"allowed-origins", "JSON"},  {"allowed-methods", "JSON"},
      {"allowed-headers", "JSON"}, {"reasoning-parser", "NAME"}};
  if (auto it = named.find(o.long_name()); it != named.end()) return it->second;
  const po::value_semantic* v = o.semantic().get();
  if (dynamic_cast<const po::typed_value<int>*>(v) || dynamic_cast<const po::typed_value<int64_t>*>(v) ||
      dynamic_cast<const po::typed_value<uint64_t>*>(v))
    return "N";
  if (dynamic_cast<const po::typed_value<float>*>(v) || dynamic_cast<const po::typed_value<double>*>(v)) return "X";
  std::string up = o.long_name();
  for (char& c : up) c = c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return up;
}

}  // namespace

std::string usage_of(const std::string& command, const po::options_description& desc) {
  std::string required, optional;
  for (const auto& o : desc.options()) {
    const std::string name = o->long_name();
    if (name.empty() || name == "help") continue;
    const po::value_semantic* v = o->semantic().get();
    std::string item = "--";
    item.append(name);
    if (v->max_tokens() > 0) item.append(" ").append(placeholder(*o));
    if (v->is_required()) {
      required.append(" ").append(item);
    } else {
      optional.append(" [").append(item).append("]");
      if (v->is_composing()) optional.append("…");  // repeatable
    }
  }
  std::string out = command;
  out.append(required).append(optional);
  return out;
}

bool parse(const Args& args, po::options_description& desc, po::variables_map& vm, const char* command) {
  desc.add_options()
      ("help,h", "show this help")
      ("log-level", po::value<std::string>(), "trace, debug, info (default on rank 0), warn (default elsewhere), error or off")
      ("quiet,q", "log warnings and errors only");
  const std::string usage_text = usage_of(command, desc);
  const char* usage = usage_text.c_str();
  try {
    const po::parsed_options parsed = po::command_line_parser(args).options(desc).run();
    po::store(parsed, vm);
    if (vm.count("help")) {
      std::cout << "usage: " << usage << "\n\n" << desc << "\n";
      return false;
    }
    po::notify(vm);
    // Every number linnet takes on its command line is a count, a size, an id or a limit:
    // none is negative. Checked on the text, since Boost reads "-1" into an unsigned as 2^64 − 1.
    for (const po::option& o : parsed.options) {
      if (o.value.empty() || o.value[0].empty() || o.value[0][0] != '-' || !vm.count(o.string_key)) continue;
      const std::type_info& t = vm[o.string_key].value().type();
      if (t == typeid(int) || t == typeid(int64_t) || t == typeid(uint64_t) || t == typeid(float) || t == typeid(double))
        throw UsageError(str("--", o.string_key, " must be 0 or more, got ", o.value[0]));
    }
  } catch (const po::unknown_option& e) {
    throw UsageError(str(e.what(), nearest_option_hint(e.get_option_name(), desc), " (usage: ", usage, ")"));
  } catch (const po::error& e) {
    throw UsageError(str(e.what(), " (usage: ", usage, ")"));
  }
  apply_logging(vm);
  return true;
}

void add_run_options(po::options_description& desc) {
  desc.add_options()
      ("batch", po::value<int64_t>()->default_value(1), "Batch: rows of the KV cache")
      ("max-seq", po::value<int64_t>()->default_value(0), "MaxSeq: positions per cache row (0: max_position_embeddings)")
      ("page-size", po::value<int64_t>(), "PageSize for the paged entries (default: 64, or MaxSeq when that is smaller)")
      ("shards", po::value<int64_t>(), "Shards: tensor-parallel group size (default: ranks per replica)")
      ("dtype", po::value<std::string>(), "T: bf16, f16 or f32 (default: the checkpoint's torch_dtype)")
      ("threads", po::value<int>()->default_value(0),
       "CPU threads per rank (0: the cores it may run on, shared among a node's ranks; the start-up log says why)")
      ("moe-sharding", po::value<std::string>()->default_value("expert"),
       "mixtures of experts: expert (Experts/Shards whole experts per rank, rows sent to them and back) or tensor "
       "(every expert sliced)")
      ("kv-cache-dtype", po::value<std::string>()->default_value("auto"),
       "the KV cache's dtype: auto (the compute dtype: f32 on the CPU), bf16, f16, fp8 (E4M3, scale 1, as vLLM's "
       "fp8 without calibrated scales) or f32; K and V are rounded to it where they are stored and read")
      ("pp", po::value<int>()->default_value(1),
       "pipeline stages: each holds a contiguous range of the layers (ranks: shard innermost, then stage, then "
       "replica; docs/parallel.md)")
      ("pp-layers", po::value<std::string>(), "each stage's layer count, in order (e.g. 12,11,11; default: even)")
      ("state-snapshots", po::value<int64_t>(),
       "models with a recurrent state (Gated DeltaNet): snapshots of it the engine keeps at page boundaries so a "
       "shared prefix is not recomputed (default: Batch; 0: no prefix sharing, and half the state's memory)");
}

std::optional<DType> kv_cache_dtype_option(const std::string& v) {
  // vLLM's spellings too (bfloat16, fp8_e4m3); its fp8_e5m2 is another format.
  if (v == "auto") return std::nullopt;
  if (v == "bf16" || v == "bfloat16") return DType::bf16;
  if (v == "f16" || v == "float16" || v == "half") return DType::f16;
  if (v == "f32" || v == "float32" || v == "float") return DType::f32;
  if (v == "fp8" || v == "fp8_e4m3") return DType::f8_e4m3;
  throw UsageError(str("--kv-cache-dtype '", v, "': expected auto, bf16, f16, fp8 (fp8_e4m3) or f32",
                       v == "fp8_e5m2" ? " (E5M2 is not kept yet)" : ""));
}

RunOptions run_options(const po::variables_map& vm) {
  RunOptions o;
  o.batch = vm["batch"].as<int64_t>();
  o.max_seq = vm["max-seq"].as<int64_t>();
  o.page_size = vm.count("page-size") ? positive_option(vm, "page-size") : 0;  // 0: default_page_size
  o.shards = vm.count("shards") ? positive_option(vm, "shards") : 0;  // 0: the shard group's size
  if (vm.count("dtype")) {
    const std::string t = vm["dtype"].as<std::string>();
    if (t != "bf16" && t != "f16" && t != "f32") throw UsageError(str("--dtype '", t, "': expected bf16, f16 or f32"));
    o.dtype = parse_dtype(t);
  }
  if (vm.count("moe-sharding")) {
    const std::string m = vm["moe-sharding"].as<std::string>();
    if (m != "expert" && m != "tensor") throw UsageError(str("--moe-sharding '", m, "': expected expert or tensor"));
    o.moe_sharding = m == "expert" ? MoeSharding::expert : MoeSharding::tensor;
  }
  if (vm.count("kv-cache-dtype")) o.kv_cache_dtype = kv_cache_dtype_option(vm["kv-cache-dtype"].as<std::string>());
  if (vm.count("state-snapshots")) {
    o.state_snapshots = vm["state-snapshots"].as<int64_t>();
    if (*o.state_snapshots < 0) throw UsageError(str("--state-snapshots must be 0 or more, got ", *o.state_snapshots));
  }
  return o;
}

int threads_option(const po::variables_map& vm) {
  const int n = vm.count("threads") ? vm["threads"].as<int>() : 0;
  if (n < 0) throw UsageError(str("--threads must be 0 (automatic) or more, got ", n));
  // OpenMP creates what it is asked for: tens of thousands of threads fail inside it (or
  // crash). More than a few per core only spin against each other.
  cpu_set_t set;
  const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  if (n > 4 * cores)
    throw UsageError(str("--threads ", n, " is more than 4 × the ", cores, " core(s) this rank may use (at most ",
                         4 * cores, ")"));
  return n;
}

PipelineOption pp_option(const po::variables_map& vm) {
  PipelineOption p;
  p.pp = vm.count("pp") ? vm["pp"].as<int>() : 1;
  if (p.pp < 1) throw UsageError(str("--pp must be a positive number of pipeline stages, got ", p.pp));
  if (vm.count("pp-layers")) p.counts = parse_stage_counts(vm["pp-layers"].as<std::string>());
  return p;
}

int tp_option(const po::variables_map& vm) {
  const int tp = vm["tp"].as<int>();
  if (tp < 0) throw UsageError(str("--tp must be 0 (all ranks) or a positive number of ranks, got ", tp));
  return tp;
}

int64_t positive_option(const po::variables_map& vm, const char* name) {
  int64_t v = 0;
  if (vm[name].value().type() == typeid(int)) v = vm[name].as<int>();
  else v = vm[name].as<int64_t>();
  if (v < 1) throw UsageError(str("--", name, " must be at least 1, got ", v));
  return v;
}

void check_report_option(const po::variables_map& vm, const char* name) {
  namespace fs = std::filesystem;
  if (!vm.count(name)) return;
  const fs::path p(vm[name].as<std::string>());
  const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (fs::exists(p, ec) && !fs::is_regular_file(p, ec))
    throw Error(str(p.string(), ": --", name, " names something that is not a regular file"));
  if (!fs::is_directory(parent, ec))
    throw Error(str(p.string(), ": cannot write --", name, ": directory ", parent.string(), " does not exist"));
  if (::access(parent.c_str(), W_OK | X_OK) != 0 || (fs::exists(p, ec) && ::access(p.c_str(), W_OK) != 0))
    throw Error(str(p.string(), ": cannot write --", name, ": ", std::strerror(errno)));
}

void add_engine_options(po::options_description& desc) {
  desc.add_options()
      ("kv-cache-memory", po::value<std::string>()->default_value("0.8"),
       "KV pool: bytes (e.g. 2GiB) or a fraction of the memory free after the weights")
      ("max-batch-tokens", po::value<int64_t>()->default_value(512), "tokens per step (prefill chunks + decoding rows)")
      ("max-rows", po::value<int64_t>()->default_value(256), "requests running at once, per replica")
      ("backend", po::value<std::string>()->default_value("auto"), "cpu, cuda or auto")
      ("tp", po::value<int>()->default_value(0), "ranks per model replica (default: all ranks)");
}

EngineOptions engine_options_from(const po::variables_map& vm) {
  EngineOptions o;
  o.limits.token_budget = positive_option(vm, "max-batch-tokens");
  o.limits.max_rows = positive_option(vm, "max-rows");
  o.kv_memory = parse_kv_memory(vm["kv-cache-memory"].as<std::string>());
  return o;
}

void add_bos_option(po::options_description& desc) {
  desc.add_options()("add-bos", po::value<std::string>()->default_value("auto"),
                     "texts start with BOS: auto (as transformers' tokenizer for this checkpoint does), yes or no");
}

bool add_bos_from(const po::variables_map& vm, const std::string& checkpoint_dir, const Tokenizer& tok) {
  const std::string v = vm["add-bos"].as<std::string>();
  if (v == "no") return false;
  if (v == "yes") {
    if (tok.bos_id() < 0) throw UsageError("--add-bos yes: the checkpoint's tokenizer has no BOS token");
    return true;
  }
  if (v != "auto") throw UsageError(str("--add-bos '", v, "': expected auto, yes or no"));
  const BosChoice c = choose_add_bos(checkpoint_dir, tok);
  spdlog::info("texts {} BOS: {} (--add-bos yes|no overrides)", c.add ? "start with" : "get no", c.why);
  return c.add;
}

void add_chat_template_option(po::options_description& desc) {
  desc.add_options()("chat-template", po::value<std::string>(),
                     "FILE: the Jinja chat template to render conversations with (default: the checkpoint's)");
}

std::unique_ptr<ChatTemplate> chat_template_from(const po::variables_map& vm, const std::string& checkpoint_dir,
                                                 std::string& why_not) {
  why_not.clear();
  if (vm.count("chat-template")) {
    const std::string file = vm["chat-template"].as<std::string>();
    auto t = std::make_unique<ChatTemplate>(ChatTemplate::load(checkpoint_dir, file));
    if (const std::string p = t->problem(); !p.empty())
      throw Error(str(file, ": --chat-template does not parse: ", p));
    return t;
  }
  std::unique_ptr<ChatTemplate> t;
  try {
    t = std::make_unique<ChatTemplate>(ChatTemplate::load(checkpoint_dir));
  } catch (const Error& e) {
    why_not = str("this model has no chat template (", e.what(), "); give the server one with --chat-template FILE");
    return nullptr;
  }
  if (const std::string p = t->problem(); !p.empty()) {
    why_not = str("the checkpoint's chat template does not parse: ", p, " (give one that does with --chat-template FILE)");
    spdlog::warn("{}; conversations are refused, completions run", why_not);
    return nullptr;
  }
  return t;
}

OnError on_error_option(const std::string& value) {
  if (value == "stop") return OnError::stop;
  if (value == "skip") return OnError::skip;
  throw UsageError(str("--on-error '", value, "': expected stop or skip"));
}

}  // namespace linnet::cli
