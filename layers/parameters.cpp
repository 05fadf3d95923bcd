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

std::vector<std::pair<int64_t, int64_t>> ParamSpec::stored_row_ranges(int64_t first, int64_t last) const {
  if (row_block <= 0) return {{row_offset + first, row_offset + last}};
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t r = first; r < last;) {
    const int64_t j = r / row_block, in = r % row_block, n = std::min(row_block - in, last - r);
    const int64_t begin = row_offset + j * row_stride + in;
    out.emplace_back(begin, begin + n);
    r += n;
  }
  return out;
}

namespace {
// A part stored [columns, rows] of its matrix (WeightCompanion::transposed: GPTQ) is split
// along its other dimension: the matrix's rows are its columns.
void transpose_split(ParamSpec& c) {
  if (c.split == Split::rows) c.split = Split::columns;
  else if (c.split == Split::columns) c.split = Split::rows;
}
}  // namespace

std::vector<ParamSpec> ParamSpec::companions() const {
  std::vector<ParamSpec> out;
  const std::vector<WeightCompanion> stored_parts = layout.companions_of(stored_shape());
  const std::vector<WeightCompanion> parts = layout.companions_of(full);
  for (size_t i = 0; i < parts.size(); ++i) {
    ParamSpec c = *this;
    c.hf_name = layout.part_name(hf_name, parts[i]);
    c.card_name = layout.part_name(card_name, parts[i]);
    c.full = parts[i].shape;  // as stored (turned, when transposed)
    c.layout = WeightLayout{};
    c.dtype = parts[i].dtype;
    c.optional_bias = false;
    if (parts[i].role == PartRole::group_index) {  // g_idx: one per input column, the stored tensor's
      c.stored = Shape{};
      c.row_offset = 0;
      if (split == Split::columns) c.split = Split::rows;  // its dimension 0 is the columns
      if (split == Split::rows) c.split = Split::mirrored, c.per_shard = 0, c.replicas = 1;
    } else if (c.full.rank() == 1) {  // one for the whole tensor (a per-tensor or input scale): every shard's
      c.stored = Shape{};
      c.row_offset = 0;
      if (split == Split::rows || split == Split::columns) c.split = Split::mirrored, c.per_shard = 0, c.replicas = 1;
    } else {
      const int dim = split == Split::columns ? 1 : 0;
      const int64_t b = parts[i].per(dim);
      // Not whole blocks only where one shard holds it all (check_blocks refuses the rest).
      if (split == Split::rows || split == Split::columns) c.per_shard = (per_shard + b - 1) / b;
      // One scale along the split dimension (per channel): every shard reads it.
      if ((split == Split::rows || split == Split::columns) && b >= WeightLayout::kWhole)
        c.split = Split::mirrored, c.per_shard = 0, c.replicas = 1;
      if (stored.rank()) c.stored = stored_parts[i].shape, c.row_offset = row_offset / parts[i].per_rows;
      // A strided part's blocks of rows hold whole blocks of the format (check_blocks): its
      // companion's rows are strided by as many of them.
      if (row_block > 0) c.row_block = row_block / parts[i].per_rows, c.row_stride = row_stride / parts[i].per_rows;
      if (parts[i].transposed) transpose_split(c);
    }
    out.push_back(std::move(c));
  }
  return out;
}

ParamSpec ParamSpec::values_part() const {
  const WeightCompanion v = layout.values_of(full);
  ParamSpec c = *this;
  c.hf_name = layout.part_name(hf_name, v.suffix);
  c.card_name = layout.part_name(card_name, v.suffix);
  c.full = v.shape;
  c.dtype = layout.data_dtype;
  if (split == Split::columns) c.per_shard = (per_shard + v.per_cols - 1) / v.per_cols;
  if (split == Split::rows) c.per_shard = (per_shard + v.per_rows - 1) / v.per_rows;
  if (stored.rank()) c.stored = layout.values_of(stored).shape, c.row_offset = row_offset / v.per_rows;
  if (row_block > 0) c.row_block = row_block / v.per_rows, c.row_stride = row_stride / v.per_rows;
  if (v.transposed) transpose_split(c);
  return c;
}

void ParamSpec::check_blocks(int64_t shards) const {
  if (row_block > 0 && !layout.dense()) {
    // A strided part (Qwen3-Next's grouped in_proj_qkvz / in_proj_ba) read quantized: its blocks
    // of rows, where they start and their stride must hold whole blocks of the format's rows (its
    // scales' rows are then strided alike), and the format may not store it transposed.
    bool whole = !layout.transposed;
    for (const WeightCompanion& part : layout.companions_of(stored_shape())) {
      if (part.shape.rank() != 2 || part.role == PartRole::group_index) continue;  // (one for the whole tensor)
      whole = whole && !part.transposed && row_block % part.per_rows == 0 && row_stride % part.per_rows == 0 &&
              row_offset % part.per_rows == 0;
    }
    const WeightCompanion v = layout.values_of(stored_shape());
    whole = whole && !v.transposed && row_block % v.per_rows == 0 && row_stride % v.per_rows == 0;
    if (!whole)
      throw Error(str(hf_name, ": a strided part of it (blocks of ", row_block, " rows every ", row_stride,
                      " from row ", row_offset, ") stored ", layout.describe(),
                      ": its blocks of rows do not hold whole blocks of the format (or the format stores it transposed)"));
  }
  if (full.rank() != 2 || layout.dense()) return;
  if (layout.transposed && stored.rank())
    throw Error(str(hf_name, ": a part of a fused tensor (", stored.to_string(), ") in ", layout.describe(),
                    ", whose parts are stored transposed, is not read yet"));
  const ActivationRounding& acts = layout.activations;
  if (split == Split::columns && shards > 1 && acts.any() && !acts.per_token() && !acts.stored) {
    // Per-group activation scales: a column slice must hold whole groups. (A per-token scale
    // spans the row: its amax is all-reduced across the shards, layers/linear.h.)
    for (int64_t s = 0; s < shards; ++s) {
      const auto [begin, end] = shard_range(s);
      if (begin % acts.group || (end % acts.group && end != full[1]))
        throw Error(str(hf_name, ": the column slice [", begin, ", ", end, ") cuts a group of ", acts.group,
                        " activations that share a scale (", layout.describe(), "): choose Shards accordingly"));
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
