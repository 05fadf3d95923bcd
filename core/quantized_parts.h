// A quantized matrix's parts as a checkpoint stores them (BackendDevice::QuantizedPart: the
// values in their packing, scales, zero points, a group index), read once into one plain form
// that every backend lays out for its own kernels: the CPU packs it in panels
// (core/cpu/packed_matmul.h), CUDA keeps it row-major (core/cuda/quantized_matmul.cu). The
// packings (compressed-tensors' words, GPTQ's and AWQ's transposed and interleaved ones,
// MXFP4's nibbles) and the checks on them live here, so both backends read the same weights.
#pragma once
#include <cstdint>
#include <vector>

#include "core/backend_device.h"
#include "core/weight_layout.h"

namespace linnet {

// A [rows, cols] matrix of the parts stacked by rows. Weight (r, c), with b its group:
//   fp8:   e4m3(values[r, c]) · scales[r, b]
//   int8:  int8(values[r, c]) · scales[r, b]                 (GPTQ 8-bit: q − 128)
//   int4:  (values[r, c] − zeros[r, b]) · scales[r, b]       (values 0…15; zero 8 symmetric)
//   mxfp4: e2m1(values[r, c]) · 2^(zeros[r, b] − 127)        (E8M0 exponents in `zeros`)
// each in f32, then rounded to `dequant` (f16: GPTQ's and AWQ's fp16 arithmetic; bf16 or f16:
// compressed-tensors' on a 16-bit model, the loader's choice).
struct QuantizedRows {
  WeightFormat format = WeightFormat::dense;
  int64_t rows = 0, cols = 0;
  int64_t group = 0;   // columns one scale covers, at most cols (a channel's scale: cols)
  int64_t groups = 0;  // scales a row: ⌈cols/group⌉, or every group of the matrix with group_index
  std::vector<uint8_t> values;   // [rows, cols], one a byte
  std::vector<float> scales;     // [rows, groups]; empty for mxfp4
  std::vector<uint8_t> zeros;    // int4: zero points, mxfp4: exponents, [rows, groups]; else empty
  std::vector<int32_t> group_index;  // [cols], each column's group; empty: column c in group c / group
  DType dequant = DType::f32;
  ActivationRounding activations;  // with the static scale where stored
  int64_t group_of(int64_t c) const { return group_index.empty() ? c / group : group_index[static_cast<size_t>(c)]; }
};

// The parts read and checked (values' count and dtype, scales' and zero points' shapes, a
// group index in range and shared by every part, static activation scales equal); errors read
// "<backend> upload_quantized_matrix: …". Gives the parts' file pages back as it goes.
QuantizedRows read_quantized_parts(const std::vector<BackendDevice::QuantizedPart>& parts, const WeightLayout& layout,
                                   const char* backend);

// Every weight of m as the formula above gives it, each in f32 then rounded to m.dequant,
// [rows, cols] row-major: for a layer whose product needs the matrix itself in another shape
// (latent attention's per-head blocks of kv_b_proj, transposed: layers/weight_loader.h).
std::vector<float> dequantize_rows(const QuantizedRows& m);

}  // namespace linnet
