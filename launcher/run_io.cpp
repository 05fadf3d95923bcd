#include "launcher/run_io.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"

namespace linnet::cli {

std::string replica_path(const Ranks& ranks, std::string pattern) {
  for (size_t at; (at = pattern.find("{replica}")) != std::string::npos;)
    pattern.replace(at, 9, std::to_string(ranks.replica()));
  return pattern;
}

// Shard 0 of the replica reads the file; the others get its tensors by broadcast: first a
// JSON list of (name, dtype, shape), then each tensor's bytes. A file shard 0 cannot read is
// an error on every shard (all_ok), not a hang in the broadcast.
std::map<std::string, Tensor> read_inputs(Ranks& ranks, const std::string& path) {
  Communicator& comm = ranks.shards();
  std::map<std::string, Tensor> out;
  std::string header, problem;
  if (comm.rank() == 0) {
    try {
      SafetensorsFile file(path);
      nlohmann::json list = nlohmann::json::array();
      for (const auto& name : file.names()) {
        out[name] = file.read(name);
        list.push_back({name, dtype_name(out[name].dtype()), out[name].shape().dims()});
      }
      header = list.dump();
    } catch (const Error& e) {
      problem = str("--inputs: ", e.what());
    }
  }
  if (!comm.all_ok(problem.empty()))
    throw Error(problem.empty() ? str("--inputs: shard 0 of replica ", ranks.replica(), " cannot read ", path, " (its error says why)")
                                : problem);
  if (comm.size() == 1) return out;
  Tensor len = Tensor::from_ints({1}, {static_cast<int64_t>(header.size())}, DType::i64);
  comm.broadcast(len, 0);
  const int64_t n = len.to_ints()[0];
  Tensor bytes = Tensor::zeros({(n + 3) / 4}, DType::i32);
  std::memcpy(bytes.data(), header.data(), header.size());
  comm.broadcast(bytes, 0);
  const auto list = nlohmann::json::parse(std::string(static_cast<const char*>(bytes.data()), static_cast<size_t>(n)));
  for (const auto& e : list) {
    const std::string name = e[0].get<std::string>();
    if (comm.rank() != 0) out[name] = Tensor::empty(Shape(e[2].get<std::vector<int64_t>>()), parse_dtype(e[1].get<std::string>()));
    comm.broadcast(out[name], 0);
  }
  return out;
}

namespace {
// Each replica's leader (shard 0 of stage 0) writes its own file when the path names {replica}; otherwise only
// world rank 0 writes (every rank of a replica holds the same full outputs).
bool writes_outputs(Ranks& ranks, const std::string& path, const std::string& pattern) {
  const bool per_replica = path != pattern;
  return ranks.leads_replica() && (per_replica || ranks.world_rank() == 0);
}
}  // namespace

void check_writable(Ranks& ranks, const std::string& path, const std::string& pattern) {
  namespace fs = std::filesystem;
  std::string problem;
  if (writes_outputs(ranks, path, pattern)) {
    std::error_code ec;
    const fs::path p(path);
    const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
    if (fs::exists(p, ec) && !fs::is_regular_file(p, ec))
      problem = str(path, ": --outputs names something that is not a regular file");
    else if (!fs::is_directory(parent, ec))
      problem = str(path, ": cannot write --outputs: directory ", parent.string(), " does not exist");
    else if (::access(parent.c_str(), W_OK | X_OK) != 0 || (fs::exists(p, ec) && ::access(path.c_str(), W_OK) != 0))
      problem = str(path, ": cannot write --outputs: ", std::strerror(errno));
  }
  if (!ranks.shards().all_ok(problem.empty()))
    throw Error(problem.empty() ? str("--outputs: shard 0 of replica ", ranks.replica(), " cannot write ", path,
                                      " (its error says why)")
                                : problem);
}

void write_outputs(Ranks& ranks, const std::string& path, const std::string& pattern,
                   const std::vector<std::pair<std::string, Tensor>>& outputs) {
  if (!writes_outputs(ranks, path, pattern)) return;
  save_safetensors(path, outputs);
  spdlog::info("wrote {} outputs to {}", outputs.size(), path);
}

}  // namespace linnet::cli
