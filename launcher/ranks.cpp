#include "launcher/ranks.h"

#include <spdlog/spdlog.h>

#include "checkpoint/safetensors.h"

namespace linnet::cli {

struct Ranks::Mpi {};

Ranks::Ranks(int tp, const std::string& backend_kind) {
  if (tp > 1) throw Error(str("--tp ", tp, " needs ", tp, " ranks, but this run has 1 (start it with mpirun)"));
  backend_ = make_backend(backend_kind, 0);
  shards_ = std::make_unique<SingleCommunicator>();
  spdlog::info("backend {}, 1 rank", backend_->name());
}

Ranks::~Ranks() = default;

std::string Ranks::replica_path(std::string pattern) const {
  for (size_t at; (at = pattern.find("{replica}")) != std::string::npos;)
    pattern.replace(at, 9, std::to_string(replica_));
  return pattern;
}

std::map<std::string, Tensor> Ranks::read_inputs(const std::string& path) {
  SafetensorsFile file(path);
  std::map<std::string, Tensor> out;
  for (const auto& name : file.names()) out[name] = file.read(name);
  return out;
}

void Ranks::write_outputs(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& outputs) {
  if (shards_->rank() != 0) return;
  save_safetensors(path, outputs);
}

}  // namespace linnet::cli
