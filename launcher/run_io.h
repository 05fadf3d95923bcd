// `linnet run`'s files: --inputs read on a replica's shard 0 and broadcast to its shards;
// --outputs written by one rank (or each replica's shard 0 when the path names {replica}),
// checked writable before the model loads.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "launcher/ranks.h"

namespace linnet::cli {

// "{replica}" in a path becomes this rank's replica index.
std::string replica_path(const Ranks& ranks, std::string pattern);
std::map<std::string, Tensor> read_inputs(Ranks& ranks, const std::string& path);
// Throws on every rank of the replica unless its writer can create `path` (before the model
// loads: a wrong output path should not cost the run). pattern: --outputs as given.
void check_writable(Ranks& ranks, const std::string& path, const std::string& pattern);
void write_outputs(Ranks& ranks, const std::string& path, const std::string& pattern,
                   const std::vector<std::pair<std::string, Tensor>>& outputs);

}  // namespace linnet::cli
