#include "launcher/options.h"

#include "core/error.h"

namespace linnet::cli {

bool parse(const Args& args, po::options_description& desc, po::variables_map& vm, const char* usage) {
  desc.add_options()("help,h", "show this help");
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: " << usage << "\n\n" << desc << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw Error(str(e.what(), " (usage: ", usage, ")"));
  }
  return true;
}

void add_run_options(po::options_description& desc) {
  desc.add_options()
      ("batch", po::value<int64_t>()->default_value(1), "Batch: rows of the KV cache")
      ("max-seq", po::value<int64_t>()->default_value(0), "MaxSeq: positions per cache row (0: max_position_embeddings)")
      ("page-size", po::value<int64_t>()->default_value(64), "PageSize for the paged entries")
      ("shards", po::value<int64_t>(), "Shards: tensor-parallel group size (default: ranks per replica)")
      ("dtype", po::value<std::string>(), "T: bf16, f16 or f32 (default: the checkpoint's torch_dtype)");
}

RunOptions run_options(const po::variables_map& vm) {
  RunOptions o;
  o.batch = vm["batch"].as<int64_t>();
  o.max_seq = vm["max-seq"].as<int64_t>();
  o.page_size = vm["page-size"].as<int64_t>();
  if (vm.count("shards")) o.shards = vm["shards"].as<int64_t>();
  if (vm.count("dtype")) o.dtype = parse_dtype(vm["dtype"].as<std::string>());
  return o;
}

}  // namespace linnet::cli
