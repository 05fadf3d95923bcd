#include "layers/parameters.h"

#include <algorithm>

#include "layers/model_definition.h"

#include "core/error.h"

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

std::vector<ParamSpec> ParamSpec::companions() const {
  std::vector<ParamSpec> out;
  const std::vector<WeightCompanion> stored_parts = layout.companions_of(stored_shape());
  const std::vector<WeightCompanion> parts = layout.companions_of(full);
  for (size_t i = 0; i < parts.size(); ++i) {
    ParamSpec c = *this;
    c.hf_name += parts[i].suffix;
    c.card_name += parts[i].suffix;
    c.full = parts[i].shape;
    c.layout = WeightLayout{};
    c.dtype = parts[i].dtype;
    c.optional_bias = false;
    if (c.full.rank() == 1) {  // g_idx: one per input column, the stored tensor's
      c.stored = Shape{};
      c.row_offset = 0;
      if (split == Split::columns) c.split = Split::rows;  // its dimension 0 is the columns
      if (split == Split::rows) c.split = Split::mirrored, c.per_shard = 0, c.replicas = 1;
    } else {
      const int dim = split == Split::columns ? 1 : 0;
      const int64_t b = parts[i].per(dim);
      // Not whole blocks only where one shard holds it all (check_blocks refuses the rest).
      if (split == Split::rows || split == Split::columns) c.per_shard = (per_shard + b - 1) / b;
      // One scale along the split dimension (per channel): every shard reads it.
      if ((split == Split::rows || split == Split::columns) && b >= WeightLayout::kWhole)
        c.split = Split::mirrored, c.per_shard = 0, c.replicas = 1;
      if (stored.rank()) c.stored = stored_parts[i].shape, c.row_offset = row_offset / parts[i].per_rows;
    }
    out.push_back(std::move(c));
  }
  return out;
}

ParamSpec ParamSpec::values_part() const {
  const WeightCompanion v = layout.values_of(full);
  ParamSpec c = *this;
  c.hf_name += v.suffix;
  c.card_name += v.suffix;
  c.full = v.shape;
  c.dtype = layout.data_dtype;
  if (split == Split::columns) c.per_shard = (per_shard + v.per_cols - 1) / v.per_cols;
  if (stored.rank()) c.stored = layout.values_of(stored).shape;
  return c;
}

void ParamSpec::check_blocks(int64_t shards) const {
  if (full.rank() != 2 || layout.dense()) return;
  if (split == Split::columns && shards > 1 && layout.fp8_activations != 0) {
    // The activations' FP8 scales span their row (token) or groups of it: a column slice must
    // hold whole groups; a whole row's amax would need every rank's columns.
    if (layout.fp8_activations < 0)
      throw Error(str(hf_name, ": its input is rounded to FP8 with one scale per token (", layout.describe(),
                      "), which a column split over ", shards,
                      " shards would have to gather from every rank; not supported yet: run it at Shards 1, or "
                      "use per-group activations"));
    for (int64_t s = 0; s < shards; ++s) {
      const auto [begin, end] = shard_range(s);
      if (begin % layout.fp8_activations || (end % layout.fp8_activations && end != full[1]))
        throw Error(str(hf_name, ": the column slice [", begin, ", ", end, ") cuts a group of ", layout.fp8_activations,
                        " activations that share an FP8 scale (", layout.describe(), "): choose Shards accordingly"));
    }
  }
  if (stored.rank()) check_block_boundaries(hf_name, layout, 0, row_offset, row_offset + full[0], stored[0]);
  if (split != Split::rows && split != Split::columns) return;
  const int dim = split == Split::columns ? 1 : 0;
  for (int64_t s = 0; s < shards; ++s) {
    const auto [begin, end] = shard_range(s);
    check_block_boundaries(hf_name, layout, dim, begin, end, full[dim]);
  }
}

void check_weight_layouts(const std::vector<ParamSpec>& specs, int64_t shards,
                          const std::function<bool(WeightFormat)>& supported, const std::string& backend) {
  for (const auto& p : specs) {
    if (!supported(p.layout.format))
      throw Error(str(p.hf_name, " is stored as ", weight_format_name(p.layout.format), ", which the ", backend,
                      " backend does not support"));
    p.check_blocks(shards);
  }
}

// Each architecture composes its own (layers/parameter_table.h); Llama's without one.
std::vector<ParamSpec> parameter_specs(const ModelConfig& c, const Generics& g) {
  return definition_of(c).parameters(c, g);
}

}  // namespace linnet
