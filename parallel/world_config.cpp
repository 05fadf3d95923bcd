#include "parallel/world_config.h"

#include <sstream>

#include "core/error.h"

namespace linnet {

WorldConfig WorldConfig::make(int world, int tp, int pp) {
  if (world < 1) throw Error(str("a job of ", world, " ranks"));
  if (pp < 1) throw Error(str("--pp must be a positive number of pipeline stages, got ", pp));
  if (tp < 0) throw Error(str("--tp must be 0 (every rank of a stage) or a positive number of ranks, got ", tp));
  if (tp == 0 && pp > world)
    throw Error(str("--pp ", pp, " needs at least ", pp, " ranks (a stage a rank), but this job has ", world,
                    world == 1 ? " (start it with mpirun or srun)" : ""));
  if (tp > 0 && tp * pp > world)
    throw Error(str("--pp ", pp, " with --tp ", tp, " needs ", pp, " × ", tp, " = ", pp * tp, " ranks, but this job has ",
                    world, world == 1 ? " (start it with mpirun or srun)" : ""));
  if (tp == 0) {
    if (world % pp != 0)
      throw Error(str("--pp ", pp, " does not divide the ", world, " ranks: each of a replica's stages is the same "
                      "number of ranks (the world is replicas × stages × shards)"));
    tp = world / pp;
  }
  if (world % (tp * pp) != 0)
    throw Error(str("--pp ", pp, " with --tp ", tp, ": ", pp, " stages × ", tp, tp == 1 ? " shard = " : " shards = ", tp * pp,
                    " ranks a replica, which does not divide the ", world,
                    " ranks (the world is replicas × stages × shards)"));
  return {world, tp, pp};
}

std::string WorldConfig::describe() const {
  return str(world, world == 1 ? " rank" : " ranks", " = ", replicas(), replicas() == 1 ? " replica" : " replicas", " × ",
             pp, pp == 1 ? " stage" : " stages", " × ", tp, tp == 1 ? " shard" : " shards", " (rank = (replica · ", pp,
             " + stage) · ", tp, " + shard)");
}

std::vector<StageLayers> stage_layers(int64_t layers, int pp, const std::vector<int64_t>& counts) {
  if (pp < 1) throw Error(str("--pp must be a positive number of pipeline stages, got ", pp));
  if (pp > layers)
    throw Error(str("--pp ", pp, ": more pipeline stages than the model's ", layers, " layers (each stage holds at "
                    "least one)"));
  std::vector<int64_t> n = counts;
  if (n.empty()) {
    n.assign(static_cast<size_t>(pp), layers / pp);
    for (int64_t i = 0; i < layers % pp; ++i) n[static_cast<size_t>(pp - 2 - i)] += 1;
  } else {
    if (static_cast<int64_t>(n.size()) != pp)
      throw Error(str("--pp-layers names ", n.size(), " stages' layers, but --pp is ", pp));
    int64_t sum = 0;
    for (size_t s = 0; s < n.size(); ++s) {
      if (n[s] < 1) throw Error(str("--pp-layers: stage ", s, " holds ", n[s], " layers (each stage holds at least one)"));
      sum += n[s];
    }
    if (sum != layers)
      throw Error(str("--pp-layers sums to ", sum, " layers, but the model has ", layers, " (the stages hold every "
                      "layer once)"));
  }
  std::vector<StageLayers> out;
  int64_t at = 0;
  for (int64_t c : n) {
    out.push_back({at, at + c});
    at += c;
  }
  return out;
}

std::vector<int64_t> parse_stage_counts(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  size_t index = 0;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())
      throw Error(str("--pp-layers '", text, "': entry ", index, " ('", item, "') is not a whole number of layers"));
    out.push_back(v);
    ++index;
  }
  if (out.empty()) throw Error(str("--pp-layers '", text, "' names no stage"));
  return out;
}

}  // namespace linnet
