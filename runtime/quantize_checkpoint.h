// `linnet quantize`: a bf16/f16/f32 Hugging Face checkpoint rewritten with its linear layers'
// matrices quantized, in a format transformers reads, so a CPU node can make the files linnet
// (and transformers, vLLM) run from. Round to nearest; no calibration (docs/quantization.md).
#pragma once
#include <cstdint>
#include <string>

namespace linnet {

struct QuantizeOptions {
  // fp8-block: Hugging Face's fine-grained FP8; fp8-channel, w8a8, w4a16, w4a16-asym:
  // compressed-tensors' FP8_DYNAMIC (float-quantized, a scale a row, activations FP8 per
  // token), W8A8 (int-quantized, a scale a row, activations int8 per token), W4A16
  // (pack-quantized symmetric 4-bit groups) and W4A16_ASYM (the same with zero points).
  std::string scheme = "fp8-block";
  int64_t block_rows = 128, block_cols = 128;  // fp8-block
  int64_t group = 128;                         // w4a16, w4a16-asym: columns a scale covers
};

// The schemes `scheme` may name, and which of them are written (the others refused by name).
const char* quantize_schemes();

// Writes `out` (created; must not exist or be empty): config.json with quantization_config,
// model.safetensors, and every other file of `src` (tokenizer, generation config) copied.
// fp8-block: each linear layer's weight (q/k/v/o, gate/up/down; not embeddings, norms,
// lm_head) becomes F8_E4M3 with an f32 `weight_scale_inv` per block_rows × block_cols block:
// scale = amax|w| / 448 (1 for an all-zero block), q = e4m3(w / scale) rounded to nearest
// even. w4a16: each becomes compressed-tensors' weight_packed (4-bit values, +8, eight an I32)
// with weight_scale (the checkpoint's dtype) per `group` columns of a row and weight_shape:
// scale = amax|w| / 7.5, q = round_half_even(clamp(w / scale, −8, 7)), as compressed-tensors
// computes it; w4a16-asym adds weight_zero_point (4-bit, +8, eight rows an I32): with mn, mx
// the group's min and max widened to include 0, scale = (mx − mn) / 15, zero = clamp(−8 −
// mn / scale, −8, 7) rounded half to even, q = round_half_even(clamp(w / scale + zero, −8, 7)).
// fp8-channel and w8a8: each becomes `weight` (F8_E4M3 or I8) with weight_scale
// [rows, 1] in the checkpoint's dtype: scale = amax|w| / 448 (127.5), q = e4m3(clamp(w / scale,
// ±448)) (round_half_even(clamp(w / scale, −128, 127))). Throws naming the tensor when a block or group does not divide its matrix
// (transformers reads the block size back from the scales' grid), and for a checkpoint already
// quantized.
void quantize_checkpoint(const std::string& src, const std::string& out, const QuantizeOptions& options);

}  // namespace linnet
