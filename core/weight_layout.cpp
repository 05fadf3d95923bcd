#include "core/weight_layout.h"

#include <iterator>

#include "core/error.h"

namespace linnet {

namespace {
// The traits table, indexed by WeightFormat.
const WeightFormatTraits kTraits[] = {
    {"dense", 1, 1, 0, std::nullopt, std::nullopt, false, "_scale"},
    {"fp8", 128, 128, 8, DType::f32, std::nullopt, false, "_scale_inv"},
    {"int4", 1, 128, 4, DType::f32, DType::i32, false, "_scale"},
    {"int8", 1, int64_t{1} << 40, 8, DType::f32, std::nullopt, false, "_scale"},
    {"mxfp4", 1, 32, 4, DType::f8_e8m0, std::nullopt, false, "_scale"},
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t gcd(int64_t a, int64_t b) { return b == 0 ? a : gcd(b, a % b); }
}  // namespace

const WeightFormatTraits& weight_format_traits(WeightFormat f) {
  const auto i = static_cast<size_t>(f);
  LINNET_CHECK(i < std::size(kTraits), "weight format ", int(i), " has no traits");
  return kTraits[i];
}

const char* weight_format_name(WeightFormat f) { return weight_format_traits(f).name; }

WeightLayout WeightLayout::of(WeightFormat f) {
  const WeightFormatTraits& t = weight_format_traits(f);
  WeightLayout l;
  l.format = f;
  l.block_rows = t.block_rows;
  l.block_cols = t.block_cols;
  l.data_bits = t.data_bits;
  l.scale_dtype = t.scale_dtype;
  l.zero_point_dtype = t.zero_point_dtype;
  l.group_index = t.group_index;
  l.scale_suffix = t.scale_suffix;
  if (f == WeightFormat::fp8) l.data_dtype = DType::f8_e4m3;
  if (f == WeightFormat::int8) l.data_dtype = DType::i8;
  if (f == WeightFormat::int4) l.data_dtype = DType::i32, l.values_suffix = "_packed", l.values_per_word = 8, l.shape_suffix = "_shape";
  if (f == WeightFormat::mxfp4) l.data_dtype = DType::u8, l.values_suffix = "_packed", l.values_per_word = 2;
  return l;
}

WeightLayout WeightLayout::int4_groups(int64_t group, bool symmetric, bool reordered) {
  LINNET_CHECK(group > 0, "int4 groups of ", group);
  WeightLayout l = of(WeightFormat::int4);
  l.block_cols = group;
  l.group_index = reordered;
  if (symmetric) l.zero_point_dtype.reset();
  else l.zero_points_per_word = 8;
  return l;
}

WeightLayout WeightLayout::int8_groups(int64_t group) {
  LINNET_CHECK(group > 0, "int8 groups of ", group);
  WeightLayout l = of(WeightFormat::int8);
  l.block_cols = group;
  return l;
}

WeightLayout WeightLayout::int8_packed_groups(int64_t group) {
  WeightLayout l = int8_groups(group);
  l.data_dtype = DType::i32;
  l.values_suffix = "_packed";
  l.values_per_word = 4;
  l.shape_suffix = "_shape";
  return l;
}

WeightLayout WeightLayout::mxfp4_blocks() { return of(WeightFormat::mxfp4); }

WeightLayout WeightLayout::gpt_oss_mxfp4() {
  WeightLayout l = of(WeightFormat::mxfp4);
  l.values_suffix = "_blocks";
  l.scale_suffix = "_scales";
  return l;
}

WeightLayout WeightLayout::gptq_groups(int64_t group, bool v1, int bits) {
  LINNET_CHECK(group > 0 && (bits == 4 || bits == 8), "gptq ", bits, "-bit groups of ", group);
  WeightLayout l = of(bits == 8 ? WeightFormat::int8 : WeightFormat::int4);
  l.block_cols = group;
  l.data_dtype = DType::i32;
  l.values_per_word = 32 / bits;
  l.zero_point_dtype = DType::i32;
  l.zero_points_per_word = 32 / bits;
  l.group_index = true;
  l.transposed = true;
  l.module_names = true;
  l.values_suffix = "qweight";
  l.scale_suffix = "scales";
  l.shape_suffix.clear();
  l.zero_point_word_add = v1 ? (bits == 8 ? 0x01010101u : 0x11111111u) : 0u;
  l.scale_dtype = DType::f16;  // as stored (widened exactly when read)
  l.dequant_dtype = DType::f16;
  return l;
}

WeightLayout WeightLayout::awq_groups(int64_t group) {
  WeightLayout l = gptq_groups(group, false);
  l.group_index = false;
  l.values_along_rows = true;
  l.interleaved_nibbles = true;
  return l;
}

std::string WeightLayout::part_name(const std::string& matrix, const WeightCompanion& part) const {
  if (!part.module_part) return part_name(matrix, part.suffix);
  const std::string module = matrix.ends_with(".weight") ? matrix.substr(0, matrix.size() - 7) : matrix;
  return module + "." + part.suffix;
}

std::string WeightLayout::part_name(const std::string& matrix, const std::string& suffix) const {
  if (!module_names) return matrix + suffix;
  const std::string module = matrix.ends_with(".weight") ? matrix.substr(0, matrix.size() - 7) : matrix;
  return module + "." + suffix;
}

WeightLayout WeightLayout::fp8_blocks(int64_t block_rows, int64_t block_cols, std::string scale_suffix) {
  LINNET_CHECK(block_rows > 0 && block_cols > 0, "fp8 blocks of ", block_rows, "×", block_cols);
  WeightLayout l = of(WeightFormat::fp8);
  l.block_rows = block_rows;
  l.block_cols = block_cols;
  l.scale_suffix = std::move(scale_suffix);
  return l;
}

std::string ActivationRounding::describe() const {
  if (!any()) return "";
  const char* f = format == ActivationFormat::fp8 ? "fp8" : "int8";
  if (stored) return str(", activations ", f, " static per tensor");
  return group < 0 ? str(", activations ", f, " per token") : str(", activations ", f, " per group of ", group);
}

std::string WeightLayout::describe() const {
  if (dense()) return "dense";
  const std::string acts = activations.describe();
  if (module_names)  // GPTQ, AWQ: zero points always stored (GPTQ: 8 when symmetric)
    return str(interleaved_nibbles ? "awq " : "gptq ", weight_format_name(format), " ",
               whole(1) ? std::string("per channel") : str("groups of ", block_cols),
               zero_point_word_add || interleaved_nibbles ? "" : " (v2 zero points)", acts);
  const std::string zeros = zero_point_dtype ? " asymmetric" : "";
  // (compressed-tensors' W8A16: int8 values four to a word)
  const std::string packed = format == WeightFormat::int8 && values_per_word > 1 ? " (packed)" : "";
  if (block_rows == 1 && whole(1)) return str(weight_format_name(format), zeros, " per channel", packed, acts);
  if (whole(0) && whole(1)) return str(weight_format_name(format), zeros, " per tensor", packed, acts);
  if (format == WeightFormat::mxfp4 && block_rows == 1) return str("mxfp4 blocks of ", block_cols, acts);
  if ((format == WeightFormat::int4 || format == WeightFormat::int8) && block_rows == 1)
    return str(weight_format_name(format), zeros, " groups of ", block_cols, packed,
               group_index ? " with g_idx" : "", acts);
  return str(weight_format_name(format), zeros, " ", block_rows, "×", block_cols, acts);
}

namespace {
// A part stored [columns, rows] of the matrix (GPTQ).
WeightCompanion transposed_part(WeightCompanion c) {
  if (c.shape.rank() == 2) std::swap(c.shape[0], c.shape[1]);
  c.transposed = true;
  return c;
}
}  // namespace

std::vector<WeightCompanion> WeightLayout::companions_of(const Shape& m) const {
  std::vector<WeightCompanion> out;
  if (m.rank() != 2) return out;
  const Shape blocks = {ceil_div(m[0], block_rows), ceil_div(m[1], block_cols)};
  // One scale for the whole matrix (compressed-tensors' strategy "tensor") is stored [1].
  const bool per_tensor = block_rows >= kWhole && block_cols >= kWhole;
  if (scale_dtype)
    out.push_back({scale_suffix, per_tensor ? Shape{1} : blocks, *scale_dtype, PartRole::scales, block_rows, block_cols});
  if (zero_point_dtype)
    out.push_back({module_names ? "qzeros" : "_zero_point",
                   Shape{ceil_div(m[0], block_rows * zero_points_per_word), blocks[1]}, *zero_point_dtype,
                   PartRole::zero_points, block_rows * zero_points_per_word, block_cols});
  if (transposed)
    for (auto& c : out) c = transposed_part(c);
  if (group_index) out.push_back({module_names ? "g_idx" : "_g_idx", Shape{m[1]}, DType::i32, PartRole::group_index, 1, 1});
  // A static activation scale: one a layer, named after the module.
  if (activations.stored)
    out.push_back({"input_scale", Shape{1}, scale_dtype.value_or(DType::f32), PartRole::input_scale, kWhole, kWhole,
                   false, true});
  return out;
}

WeightCompanion WeightLayout::values_of(const Shape& m) const {
  Shape s = m;
  const int dim = values_along_rows ? 0 : 1;
  if (s.rank() == 2) s[dim] = ceil_div(s[dim], values_per_word);
  const WeightCompanion v{values_suffix, s, data_dtype.value_or(DType::f32), PartRole::values,
                          values_along_rows ? values_per_word : 1, values_along_rows ? 1 : values_per_word};
  return transposed ? transposed_part(v) : v;
}

int64_t WeightLayout::slice_unit(int dim) const {
  int64_t unit = (dim == 0) == values_along_rows ? values_per_word : 1;
  for (const auto& c : companions_of(Shape{1, 1})) {
    if (c.role == PartRole::group_index || c.per(dim) >= kWhole) continue;
    unit = unit / gcd(unit, c.per(dim)) * c.per(dim);
  }
  return unit;
}

int64_t WeightLayout::data_bytes(const Shape& m, DType dtype) const {
  if (data_bits == 0 || m.rank() != 2) return m.numel() * static_cast<int64_t>(dtype_size(dtype));
  return m[0] * ceil_div(m[1] * data_bits, 8);
}

int64_t WeightLayout::bytes(const Shape& m, DType dtype) const {
  int64_t n = data_bytes(m, dtype);
  for (const auto& c : companions_of(m)) n += c.shape.numel() * static_cast<int64_t>(dtype_size(c.dtype));
  return n;
}

void check_block_boundaries(const std::string& tensor, const WeightLayout& layout, int dim, int64_t begin, int64_t end,
                            int64_t extent) {
  const int64_t b = layout.slice_unit(dim);
  if (begin % b == 0 && (end % b == 0 || end == extent)) return;
  throw Error(str(tensor, ": the slice [", begin, ", ", end, ") of dimension ", dim, dim == 0 ? " (rows)" : " (columns)",
                  " of ", extent, " cuts a block of ", b, " (", weight_format_name(layout.format), " ", layout.block_rows,
                  "×", layout.block_cols, " blocks): choose Shards so that each shard's slice is whole blocks"));
}

}  // namespace linnet
