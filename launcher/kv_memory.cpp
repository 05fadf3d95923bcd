#include "launcher/kv_memory.h"

#include "runtime/loader.h"

#include <cmath>

#include "core/error.h"
#include "layers/footprint.h"
#include "launcher/options.h"
#include "launcher/ranks.h"

namespace linnet::cli {

KvMemory parse_kv_memory(const std::string& value) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = value.substr(used);
  const std::pair<const char*, double> units[] = {{"", 1},          {"B", 1},         {"K", 1e3},      {"KB", 1e3},
                                                  {"KiB", 1024.0},  {"M", 1e6},       {"MB", 1e6},     {"MiB", 1 << 20},
                                                  {"G", 1e9},       {"GB", 1e9},      {"GiB", 1 << 30}, {"T", 1e12},
                                                  {"TB", 1e12},     {"TiB", 1099511627776.0}};
  if (used > 0 && std::isfinite(v) && v > 0) {
    if (unit.empty() && v <= 1) return KvMemory{v, 0};
    for (auto [name, scale] : units)
      if (unit == name && v * scale >= 1 && v * scale < 9.2e18) return KvMemory{0, static_cast<int64_t>(v * scale)};
  }
  throw UsageError(str("--kv-cache-memory '", value, "': expected a fraction in (0, 1] or bytes (e.g. 2GiB, 512MB)"));
}

int64_t pool_batch(const ModelConfig& config, RunOptions options, Ranks& ranks, const KvMemory& memory,
                   const std::vector<int64_t>& lengths) {
  options.batch = 1;
  const Generics g = bind_generics(config, with_shards(options, ranks.shards()));
  Backend& be = ranks.backend();
  const Footprint f = rank_footprint(config, g, be.compute_dtype(g.t), be.weight_dtype(g.t));
  int64_t bytes = memory.bytes;
  if (bytes == 0) {
    const int64_t free = be.memory_available() / std::max(1, ranks.sharing_memory()) - f.parameters;
    bytes = static_cast<int64_t>(memory.fraction * static_cast<double>(std::max<int64_t>(free, 0)));
  }
  const int64_t slots = bytes / f.kv_per_slot;
  if (slots < g.max_seq)
    throw Error(str("the KV pool's memory (", human_bytes(double(bytes)), ") holds ", slots, " positions, fewer than MaxSeq = ",
                    g.max_seq, " (one whole sequence): lower --max-seq or raise --kv-cache-memory"));
  int64_t need = 0;
  for (int64_t n : lengths) need += (n + g.page_size - 1) / g.page_size * g.page_size;
  const int64_t wanted = (std::max(need, g.max_seq) + g.max_seq - 1) / g.max_seq;
  return std::max<int64_t>(1, std::min(wanted, slots / g.max_seq));
}

}  // namespace linnet::cli
