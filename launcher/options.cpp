#include "launcher/options.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace linnet::cli {

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

bool parse(const Args& args, po::options_description& desc, po::variables_map& vm, const char* usage) {
  desc.add_options()
      ("help,h", "show this help")
      ("log-level", po::value<std::string>(), "trace, debug, info (default on rank 0), warn (default elsewhere), error or off")
      ("quiet,q", "log warnings and errors only");
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: " << usage << "\n\n" << desc << "\n";
      return false;
    }
    po::notify(vm);
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
      ("page-size", po::value<int64_t>()->default_value(64), "PageSize for the paged entries")
      ("shards", po::value<int64_t>(), "Shards: tensor-parallel group size (default: ranks per replica)")
      ("dtype", po::value<std::string>(), "T: bf16, f16 or f32 (default: the checkpoint's torch_dtype)")
      ("threads", po::value<int>()->default_value(0), "CPU threads per rank (0: the node's cores shared among its ranks)");
}

RunOptions run_options(const po::variables_map& vm) {
  RunOptions o;
  o.batch = vm["batch"].as<int64_t>();
  o.max_seq = vm["max-seq"].as<int64_t>();
  o.page_size = vm["page-size"].as<int64_t>();
  if (vm.count("shards")) o.shards = vm["shards"].as<int64_t>();
  if (vm.count("dtype")) {
    const std::string t = vm["dtype"].as<std::string>();
    if (t != "bf16" && t != "f16" && t != "f32") throw UsageError(str("--dtype '", t, "': expected bf16, f16 or f32"));
    o.dtype = parse_dtype(t);
  }
  return o;
}

int threads_option(const po::variables_map& vm) {
  const int n = vm.count("threads") ? vm["threads"].as<int>() : 0;
  if (n < 0) throw UsageError(str("--threads must be 0 (automatic) or more, got ", n));
  return n;
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

}  // namespace linnet::cli
