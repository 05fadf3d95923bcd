#include "layers/parameters.h"

#include <algorithm>

#include "layers/model_definition.h"

namespace linnet {

const char* split_name(Split s) {
  switch (s) {
    case Split::mirrored: return "mirrored";
    case Split::rows: return "rows";
    case Split::columns: return "columns";
    case Split::expert: return "expert";
  }
  return "?";
}

Shape ParamSpec::shard_shape() const {
  Shape s = full;
  if (split == Split::rows) s[0] = per_shard;
  if (split == Split::columns) s[1] = per_shard;
  return s;
}

std::pair<int64_t, int64_t> ParamSpec::shard_range(int64_t shard) const {
  if (split == Split::mirrored || split == Split::expert) return {0, full[0]};
  const int64_t extent = split == Split::rows ? full[0] : full[1];
  const int64_t begin = std::min(shard / replicas * per_shard, extent);
  return {begin, std::min(begin + per_shard, extent)};
}

// Each architecture composes its own (layers/parameter_table.h); Llama's without one.
std::vector<ParamSpec> parameter_specs(const ModelConfig& c, const Generics& g) {
  return definition_of(c).parameters(c, g);
}

}  // namespace linnet
