// How a matrix weight is stored: its format (dense today; block-scaled and group-quantized ones
// to come) and what that implies — the block a scale covers, the companion tensors (scales,
// zero points, a group index) and the bytes it all takes. One table of per-format traits, as
// ggml's type traits and TensorRT-LLM's QuantMode: a new format is a row there plus its kernels
// (docs/design.md "How to add a weight format").
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace linnet {

// The formats a matrix can be stored in. dense: one value of the tensor's dtype per element.
// fp8: FP8 E4M3 values (DType::f8_e4m3), an f32 scale per block (Hugging Face's fine-grained
// FP8, weight_scale_inv, 128×128 blocks in DeepSeek-V3 and Qwen3-FP8; compressed-tensors'
// float-quantized weights: a tensor's, a channel's or a block's scale); weight = e4m3 · scale.
// int4: 4-bit integers packed eight to an int32 along the row (compressed-tensors'
// pack-quantized W4A16; GPTQ, stored transposed), a scale per group of columns of a row and,
// asymmetric, a zero point; weight = (q − zero) · scale. int8: 8-bit integers, one a byte (compressed-tensors'
// int-quantized W8A8), a scale per row or group of columns; weight = q · scale.
enum class WeightFormat : uint8_t { dense, fp8, int4, int8, mxfp4 };

// One row of the traits table: what a format stores. A block is block_rows × block_cols
// elements sharing one scale (and zero point); data_bits: bits per stored element (0: the
// tensor's dtype's, as dense). Examples of what fits: FP8 block-scaled 128×128, 8 bits, f32
// scales; int4 group-quantized 1×128, 4 bits, scales, zero points, g_idx; MXFP4 1×32, 4 bits,
// e8m0 scales.
struct WeightFormatTraits {
  const char* name;
  int64_t block_rows = 1;
  int64_t block_cols = 1;
  int64_t data_bits = 0;
  std::optional<DType> scale_dtype;       // none: no scales
  std::optional<DType> zero_point_dtype;  // none: symmetric (no zero points)
  bool group_index = false;               // g_idx: one i32 per input column naming its group
  const char* scale_suffix = "_scale";    // the scales' name after the matrix's
};

const WeightFormatTraits& weight_format_traits(WeightFormat f);
const char* weight_format_name(WeightFormat f);

// What a stored tensor of a quantized matrix holds.
enum class PartRole : uint8_t { values, scales, zero_points, group_index, input_scale };

// A tensor stored for a matrix: its name suffix after the matrix's name ("model…q_proj.weight"
// + "_scale"), its shape for a matrix of a given shape, its dtype, and how many of the
// matrix's rows and columns one of its elements covers (a scale: a block; packed values: 8
// columns an int32; packed zero points: 8 rows an int32) — what a slice of it is cut by.
struct WeightCompanion {
  std::string suffix;  // "", "_packed", "_scale", "_zero_point", "_g_idx"
  Shape shape;
  DType dtype;
  PartRole role = PartRole::scales;
  int64_t per_rows = 1;
  int64_t per_cols = 1;
  // Stored [columns, rows] of the matrix (GPTQ's qweight [in/8, out], scales [groups, out],
  // qzeros [groups, out/8]); `shape` is then that stored shape.
  bool transposed = false;
  // Named after the module, not the weight ("…q_proj.input_scale": compressed-tensors' static
  // activation scale), and held whole by every shard.
  bool module_part = false;
  int64_t per(int dim) const { return dim == 0 ? per_rows : per_cols; }
};

// Activations rounded before the product, as the format's reference computes them
// (compressed-tensors' dynamic input_activations): to FP8 E4M3 or to int8, one scale per row
// (token) or per group of columns of a row.
enum class ActivationFormat : uint8_t { none, fp8, int8 };
struct ActivationRounding {
  ActivationFormat format = ActivationFormat::none;
  int64_t group = 0;  // -1: one scale per row (token); g > 0: one per g columns of a row
  // Static (compressed-tensors' FP8 scheme): one scale for the whole input, the checkpoint's
  // (each layer's "…input_scale"), which an uploaded matrix's copy holds in `scale`.
  bool stored = false;
  float scale = 0;
  bool any() const { return format != ActivationFormat::none; }
  bool per_token() const { return any() && group < 0; }
  // ", activations fp8 per token", ", activations int8 per group of 16"; "" for none.
  std::string describe() const;
  bool operator==(const ActivationRounding&) const = default;
};

// The descriptor a matrix parameter carries (ParamSpec::layout): the format's traits, copied,
// so a test (or a checkpoint's config) can describe a block layout of its own.
struct WeightLayout {
  // A block as long as any matrix's dimension: one scale per row (compressed-tensors' "channel"
  // strategy: block_rows 1, block_cols kWhole). Such a block never cuts: every slice of that
  // dimension shares its one scale.
  static constexpr int64_t kWhole = int64_t{1} << 40;

  WeightFormat format = WeightFormat::dense;
  int64_t block_rows = 1;
  int64_t block_cols = 1;
  int64_t data_bits = 0;
  std::optional<DType> scale_dtype;
  std::optional<DType> zero_point_dtype;
  bool group_index = false;
  // After the matrix's name ("…q_proj.weight"): "_scale_inv" in Hugging Face's FP8,
  // "_scale" in compressed-tensors.
  std::string scale_suffix = "_scale";
  // The stored values' dtype (f8_e4m3 for fp8); none: the checkpoint's (dense).
  std::optional<DType> data_dtype;
  // Activations rounded before the product, as the format's reference computes them.
  ActivationRounding activations;
  // The values' tensor's name after the matrix's ("" FP8: "…weight"; "_packed":
  // compressed-tensors' "…weight_packed"), and how many columns one of its elements packs
  // (8 four-bit values in an int32).
  std::string values_suffix;
  int64_t values_per_word = 1;
  // Zero points packed along the rows, this many to an element (compressed-tensors: 8 in an
  // int32, [⌈rows/8⌉, groups]); 1: one per element.
  int64_t zero_points_per_word = 1;
  // A tensor beside them holding the matrix's shape (compressed-tensors' "…weight_shape"),
  // which the logical shape makes redundant; "" none.
  std::string shape_suffix;
  // GPTQ's layout: every part stored transposed ([columns, rows] of the matrix: values packed
  // eight input rows to an int32, qweight [in/8, out]) and named after the module, not the
  // weight ("…q_proj.qweight", ".scales", ".qzeros", ".g_idx": the suffixes are those names).
  bool transposed = false;
  bool module_names = false;
  // AWQ's layout: the values packed along the rows (values_per_word output rows a word: qweight
  // [in, out/8]), and each word's nibbles interleaved: nibble k holds element 8c +
  // [0, 2, 4, 6, 1, 3, 5, 7][k] (values and zero points alike).
  bool values_along_rows = false;
  bool interleaved_nibbles = false;
  // Added to each stored zero-point word before its nibbles are read (GPTQ's v1 format stores
  // zero − 1: gptqmodel adds 0x11111111 to the word, carries and all); 0 none.
  uint32_t zero_point_word_add = 0;
  // The dtype the format's dequantization rounds each weight to ((q − zero) · scale computed
  // in the scales' fp16: GPTQ); none: f32, one rounding.
  std::optional<DType> dequant_dtype;
  // compressed-tensors computes (q − zero) · scale in its scales' stored dtype: the loader sets
  // dequant_dtype to that dtype where it is bf16 or f16 (a bf16 model's weights rounded to bf16,
  // as its decompression gives them).
  bool dequant_in_scale_dtype = false;

  static WeightLayout of(WeightFormat f);
  // Hugging Face's fine-grained FP8 (quant_method "fp8"): E4M3 values, f32 weight_scale_inv
  // per block_rows × block_cols block.
  static WeightLayout fp8_blocks(int64_t block_rows, int64_t block_cols, std::string scale_suffix = "_scale_inv");
  // compressed-tensors' pack-quantized 4-bit integers: a scale per `group` columns of a row
  // (kWhole: per channel), a zero point beside it unless symmetric; reordered (actorder
  // "group"): a "…weight_g_idx" I32 [cols] naming each column's group.
  static WeightLayout int4_groups(int64_t group, bool symmetric, bool reordered = false);
  // compressed-tensors' int-quantized 8-bit integers (W8A8): a scale per `group` columns of a
  // row (kWhole: per channel), symmetric.
  static WeightLayout int8_groups(int64_t group);
  // compressed-tensors' pack-quantized 8-bit integers (W8A16): "…weight_packed" I32 [out, in/4],
  // four values a word from the low bits, each stored +128; a scale per `group` columns of a row
  // (kWhole: per channel), symmetric.
  static WeightLayout int8_packed_groups(int64_t group);
  // GPTQ (quant_method "gptq", 4 bits): qweight, scales (f16), qzeros (always stored; 8 when
  // symmetric), g_idx, all named after the module and stored transposed; groups of `group`
  // input columns (kWhole: per channel); v1 ("gptq" checkpoint_format): zero points stored
  // minus one.
  // 8 bits: int8's one-byte values, four a word (qweight [in/4, out], qzeros [groups, out/4],
  // v1's word add 0x01010101); read symmetric (every zero point 128).
  static WeightLayout gptq_groups(int64_t group, bool v1, int bits = 4);
  // MXFP4 (OCP microscaling FP4) as compressed-tensors' mxfp4-pack-quantized stores it:
  // "…weight_packed" U8 [out, in/2], two E2M1 values a byte, the first in the low nibble; a
  // "…weight_scale" U8 [out, in/32] of E8M0 exponents per block of 32 columns. (gpt-oss's
  // "…_blocks" [.., out, in/32, 16] and "…_scales" hold the same bits.)
  static WeightLayout mxfp4_blocks();
  // gpt-oss's MXFP4 experts (quant_method "mxfp4"): the same bits named after the parameter —
  // "…gate_up_proj_blocks" U8 [E, out, in/32, 16] (read as [E·out, in/2]) and
  // "…gate_up_proj_scales" U8 [E, out, in/32].
  static WeightLayout gpt_oss_mxfp4();
  // AWQ (quant_method "awq", version "gemm", 4 bits, zero points): qweight [in, out/8], qzeros
  // [groups, out/8] (zero as is), scales (f16) [groups, out], named after the module, stored
  // transposed, nibbles interleaved; weights rounded to f16 as GPTQ's.
  static WeightLayout awq_groups(int64_t group);
  // The stored name of a part of matrix `matrix` ("…q_proj.weight"): `matrix` + suffix, or
  // with module_names the module's name + "." + suffix ("…q_proj.qweight").
  std::string part_name(const std::string& matrix, const std::string& suffix) const;
  std::string part_name(const std::string& matrix, const WeightCompanion& part) const;
  // Whether the block along `dim` covers the whole dimension (a channel's scale): slices of it
  // all read scale index 0.
  bool whole(int dim) const { return block(dim) >= kWhole; }
  // One value of the tensor's dtype per element and nothing beside it.
  bool dense() const {
    return format == WeightFormat::dense && block_rows == 1 && block_cols == 1 && data_bits == 0 && !scale_dtype &&
           !zero_point_dtype && !group_index;
  }

  // "fp8 128×128", "dense": what inspect and errors print.
  std::string describe() const;
  // Scales, zero points and g_idx of a [rows, cols] matrix (shape: ⌈rows/block_rows⌉ ×
  // ⌈cols/block_cols⌉ for the first two, the zero points' rows packed zero_points_per_word to
  // an element; [cols] for g_idx); none for dense.
  std::vector<WeightCompanion> companions_of(const Shape& matrix) const;
  // The stored values of a [rows, cols] matrix: [rows, ⌈cols/values_per_word⌉] in data_dtype
  // ([⌈rows/values_per_word⌉, cols] with values_along_rows; then turned when transposed).
  WeightCompanion values_of(const Shape& matrix) const;
  // The unit a slice along `dim` must be a whole number of: every stored part's elements
  // whole (the blocks', the packed words'); 1 for dense.
  int64_t slice_unit(int dim) const;
  // Bytes of the stored values of a matrix of this shape in `dtype` (data_bits when set),
  // rounded up to whole bytes per row.
  int64_t data_bytes(const Shape& matrix, DType dtype) const;
  // data_bytes plus every companion's: what a shard of this shape holds. Dense: numel × size.
  int64_t bytes(const Shape& matrix, DType dtype) const;
  // The block along dimension `dim` of the matrix (0: rows, 1: columns).
  int64_t block(int dim) const { return dim == 0 ? block_rows : block_cols; }
};

// Throws linnet::Error unless [begin, end) of dimension `dim` (extent `extent`) starts on a
// boundary of slice_unit(dim) and ends on one or at the extent: a slice must not cut a block
// (its scale would be shared by two shards) nor a packed word. The message names the tensor,
// the dimension and the block size.
void check_block_boundaries(const std::string& tensor, const WeightLayout& layout, int dim, int64_t begin, int64_t end,
                            int64_t extent);

}  // namespace linnet
