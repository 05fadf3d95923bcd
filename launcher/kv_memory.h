// --kv-cache-memory: how big the batch engine's paged pool is. The pool is the model's
// Batch·MaxSeq/PageSize pages (docs/entries.md "The cache and its pages"), so its size is chosen
// through Batch: as many positions as the requests can use at once, within the memory given, at
// least one MaxSeq.
#pragma once
#include <string>
#include <vector>

#include "layers/generics.h"

namespace linnet::cli {

class Ranks;

struct KvMemory {
  double fraction = 0;  // of the memory free after the weights
  int64_t bytes = 0;    // or this many bytes
};

// "0.8" (a fraction in (0, 1]), or bytes: "2GiB", "512MiB", "1.5GB", "1000000"; UsageError else.
KvMemory parse_kv_memory(const std::string& value);

// The Batch whose pool holds the positions `lengths` need at once (each request's prompt +
// max_new_tokens, in whole pages), capped by the memory; throws when the memory cannot hold
// one MaxSeq.
int64_t pool_batch(const ModelConfig& config, RunOptions options, Ranks& ranks, const KvMemory& memory,
                   const std::vector<int64_t>& lengths);

}  // namespace linnet::cli
