// GPTQ's desc_act ("act-order") checkpoints and compressed-tensors' actorder "group" name each
// input column's group in a g_idx, the groups' columns scattered across the row. The kernels
// take a group as consecutive columns (core/cpu/packed_matmul.h), so the columns are put in
// their groups' order once at load and the product gathers x in that order
// (Storage::column_gather), as exllama and Marlin permute their weights and inputs.
//
// Each group's run is padded to a whole number of sub-groups of `sub` columns (the scale's
// span in the new order), so a shard's slice of a row-parallel layer, which holds part of many
// groups, still gives runs that fit: a padded column is the row's zero point (weight 0) against
// a gathered 0.
#pragma once
#include <cstdint>
#include <vector>

namespace linnet::cpu {

struct GroupOrder {
  std::vector<int32_t> gather;    // [cols']: the column of x each packed column reads; −1: padding
  std::vector<int32_t> group_of;  // [⌈cols'/sub⌉]: the stored group whose scale each sub-group takes
  int64_t sub = 0;                // columns a scale covers in the new order
  int64_t cols() const { return static_cast<int64_t>(gather.size()); }
};

// The order for g_idx [cols] (each in [0, groups): the caller has refused the rest, by name)
// whose groups are `group` columns in the stored order. `sub` is the divisor of `group` (at
// least 8, or group itself) that holds the matrix in the fewest bytes at `bits` a weight with a
// 5-byte scale and zero point per row and sub-group: `group` when every run but the last is a
// whole number of groups (a whole matrix's desc_act), less where a shard cut them.
GroupOrder group_order(const std::vector<int32_t>& g_idx, int64_t groups, int64_t group, int bits);

// Rows laid out in `order`: values [rows, cols] (one a byte) → [rows, cols'], a padded column
// taking its group's zero point (`pad` where there are none); scales and zero points [rows,
// groups] (zeros may be empty) → [rows, ⌈cols'/sub⌉].
void apply_group_order(const GroupOrder& order, int64_t rows, int64_t cols, int64_t groups,
                       std::vector<uint8_t>& values, std::vector<float>& scales, std::vector<uint8_t>& zeros,
                       uint8_t pad);

}  // namespace linnet::cpu
