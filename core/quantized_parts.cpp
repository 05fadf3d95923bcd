#include "core/quantized_parts.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace linnet {
namespace {

using Part = BackendDevice::QuantizedPart;
using Parts = std::vector<Part>;

struct Reader {
  const char* backend;
  void expect(bool ok, const std::string& what) const {
    if (!ok) throw Error(str(backend, " upload_quantized_matrix: ", what));
  }
};

// The parts' one column order (Part::group_index) as each column's group in [0, groups),
// checked; empty: the groups in order.
std::vector<int32_t> parts_group_index(const Reader& rd, const Parts& parts, int64_t cols, int64_t groups) {
  const Tensor& first = parts[0].group_index;
  for (const auto& p : parts)
    rd.expect(p.group_index.defined() == first.defined(), "parts of one matrix with and without a group index");
  if (!first.defined()) return {};
  rd.expect(first.dtype() == DType::i32 && first.shape() == Shape({cols}),
            str("group index i32 [", cols, "], got ", first.describe()));
  const std::vector<int32_t> v(first.ptr<int32_t>(), first.ptr<int32_t>() + cols);
  for (int64_t c = 0; c < cols; ++c)
    rd.expect(v[static_cast<size_t>(c)] >= 0 && v[static_cast<size_t>(c)] < groups,
              str("column ", c, " in group ", v[static_cast<size_t>(c)], ", outside [0, ", groups, ")"));
  for (const auto& p : parts)
    rd.expect(p.group_index.shape() == first.shape() && std::memcmp(p.group_index.data(), first.data(), first.nbytes()) == 0,
              "parts of one matrix with different column orders");
  return v;
}

// Static activations: one input_scale rounds the matrix's input, so its parts (q|k|v: one
// input, one calibration) must have the same one.
ActivationRounding activations_of(const Reader& rd, const Parts& parts, const WeightLayout& layout) {
  ActivationRounding a = layout.activations;
  if (!a.stored) return a;
  for (const auto& p : parts)
    rd.expect(p.input_scale.defined() && p.input_scale.numel() == 1 && p.input_scale.dtype() == DType::f32 &&
                  p.input_scale.ptr<float>()[0] == parts[0].input_scale.ptr<float>()[0],
              str("parts of one matrix with static activations need one input_scale each, the same, got ",
                  p.input_scale.defined() ? p.input_scale.describe() : std::string("none")));
  a.scale = parts[0].input_scale.ptr<float>()[0];
  return a;
}

// FP8 or int8 parts (values one a byte [rows, cols]): each row's scales (its block row's).
QuantizedRows read_bytes(const Reader& rd, const Parts& parts, const WeightLayout& layout) {
  const DType dt = layout.format == WeightFormat::fp8 ? DType::f8_e4m3 : DType::i8;
  // A block as wide as any row (per channel) is the row here.
  const int64_t cols = parts[0].data.dim(1), bc = std::min(layout.block_cols, cols), kb = (cols + bc - 1) / bc;
  rd.expect(!parts[0].group_index.defined(), str("a group index that reorders ", layout.describe(), " columns is not read"));
  QuantizedRows m;
  m.format = layout.format, m.cols = cols, m.group = bc, m.groups = kb;
  for (const auto& p : parts) {
    const Shape want = {(p.data.dim(0) + layout.block_rows - 1) / layout.block_rows, kb};
    rd.expect(p.data.rank() == 2 && p.data.dtype() == dt && p.data.dim(1) == cols && !p.data.packed(),
              str(dtype_name(dt), " row-major matrices of one width, got ", p.data.describe()));
    // (One scale for the whole matrix may come as [1].)
    rd.expect(p.scales.dtype() == DType::f32 &&
                  (p.scales.shape() == want || (p.scales.shape() == Shape{1} && want == Shape({1, 1}))),
              str("scales f32 ", want.to_string(), " for ", p.data.describe(), " in ", layout.describe(), " blocks, got ",
                  p.scales.describe()));
    m.rows += p.data.dim(0);
  }
  m.values.resize(static_cast<size_t>(m.rows * cols));
  m.scales.resize(static_cast<size_t>(m.rows * kb));
  int64_t r0 = 0;
  for (const auto& p : parts) {
    std::memcpy(m.values.data() + r0 * cols, p.data.data(), p.data.nbytes());
    const float* s = p.scales.ptr<float>();
    for (int64_t r = 0; r < p.data.dim(0); ++r)
      std::memcpy(m.scales.data() + (r0 + r) * kb, s + (r / layout.block_rows) * kb, kb * sizeof(float));
    p.data.drop_pages();
    r0 += p.data.dim(0);
  }
  m.activations = activations_of(rd, parts, layout);
  m.dequant = layout.dequant_dtype.value_or(DType::f32);
  return m;
}

// compressed-tensors' W8A16 parts: I32 words of four 8-bit values from the low bits, each stored
// +128, [rows, ⌈cols/4⌉] → the signed bytes [rows, cols] that int8's reading takes.
Parts int8_words(const Reader& rd, const Parts& parts) {
  Parts out = parts;
  for (auto& p : out) {
    const int64_t cols = p.cols, words = (cols + 3) / 4;
    rd.expect(p.data.rank() == 2 && p.data.dtype() == DType::i32 && p.data.dim(1) == words && !p.data.packed(),
              str("i32 [rows, ", words, "] words of 8-bit values, got ", p.data.describe()));
    const int64_t rows = p.data.dim(0);
    Tensor bytes = Tensor::empty({rows, cols}, DType::i8);
    const auto* w = p.data.ptr<uint32_t>();
    auto* b = bytes.ptr<int8_t>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        b[r * cols + c] = static_cast<int8_t>(static_cast<int>((w[r * words + c / 4] >> (8 * (c % 4))) & 255u) - 128);
    p.data.drop_pages();
    p.data = bytes;
  }
  return out;
}

// compressed-tensors' int4 parts: eight values a word from the low bits, each +8; zero points
// packed alike along the rows; symmetric: zero 8 (value − 8 is the signed one).
QuantizedRows read_int4(const Reader& rd, const Parts& parts, const WeightLayout& layout, int64_t cols) {
  const int64_t g = std::min(layout.block_cols, cols), words = (cols + 7) / 8;
  // Reordered groups: the scales hold every group of the matrix, a shard's too.
  const int64_t kb =
      parts[0].group_index.defined() && parts[0].scales.rank() == 2 ? parts[0].scales.dim(1) : (cols + g - 1) / g;
  QuantizedRows m;
  m.format = WeightFormat::int4, m.cols = cols, m.group = g, m.groups = kb;
  m.dequant = layout.dequant_dtype.value_or(DType::f32);
  m.group_index = parts_group_index(rd, parts, cols, kb);
  for (const auto& p : parts) {
    const int64_t r = p.data.dim(0);
    rd.expect(p.data.rank() == 2 && p.data.dtype() == DType::i32 && p.data.dim(1) == words && !p.data.packed(),
              str("i32 [rows, ", words, "] words of 4-bit values, got ", p.data.describe()));
    rd.expect(p.scales.dtype() == DType::f32 && p.scales.shape() == Shape({r, kb}),
              str("scales f32 [", r, ", ", kb, "] for groups of ", g, ", got ", p.scales.describe()));
    rd.expect(layout.zero_point_dtype.has_value() == p.zero_points.defined(),
              str(layout.describe(), " takes ", layout.zero_point_dtype ? "zero points" : "no zero points"));
    if (p.zero_points.defined())
      rd.expect(p.zero_points.dtype() == DType::i32 && p.zero_points.shape() == Shape({(r + 7) / 8, kb}),
                str("zero points i32 [", (r + 7) / 8, ", ", kb, "] (8 rows a word), got ", p.zero_points.describe()));
    m.rows += r;
  }
  m.values.resize(static_cast<size_t>(m.rows * cols));
  m.zeros.assign(static_cast<size_t>(m.rows * kb), 8);
  m.scales.resize(static_cast<size_t>(m.rows * kb));
  int64_t r0 = 0;
  for (const auto& p : parts) {
    const int64_t r = p.data.dim(0);
    const auto* w = p.data.ptr<uint32_t>();
    for (int64_t i = 0; i < r; ++i)
      for (int64_t c = 0; c < cols; ++c) m.values[(r0 + i) * cols + c] = (w[i * words + c / 8] >> (4 * (c % 8))) & 15u;
    std::memcpy(m.scales.data() + r0 * kb, p.scales.data(), p.scales.nbytes());
    if (p.zero_points.defined()) {
      const auto* z = p.zero_points.ptr<uint32_t>();
      for (int64_t i = 0; i < r; ++i)
        for (int64_t b = 0; b < kb; ++b) m.zeros[(r0 + i) * kb + b] = (z[(i / 8) * kb + b] >> (4 * (i % 8))) & 15u;
    }
    p.data.drop_pages();
    r0 += r;
  }
  return m;
}

// GPTQ's and AWQ's parts, stored transposed and named after the module (scales [groups, rows],
// widened to f32; zero points I32 [groups, rows/per], `per` output rows a word):
//   GPTQ: qweight I32 [cols/per, rows], `per` input columns a word from the low bits; v1 stores
//         zero − 1: the word add restores it, carries and all, as gptqmodel reads it.
//   AWQ:  qweight I32 [cols, rows/8], eight output rows a word, nibble k holding row 8c +
//         [0, 2, 4, 6, 1, 3, 5, 7][k] (the zero points alike), zero points as they are.
// 8 bits (GPTQ): int8's signed bytes q − 128, every zero point 128 (symmetric: the config
// refuses sym false, a file that holds another zero is refused here).
QuantizedRows read_module_parts(const Reader& rd, const Parts& parts, const WeightLayout& layout, int64_t cols) {
  const int64_t g = std::min(layout.block_cols, cols);
  // Reordered groups (desc_act): the scales hold every group of the matrix, a shard's too.
  const int64_t kb =
      parts[0].group_index.defined() && parts[0].scales.rank() == 2 ? parts[0].scales.dim(0) : (cols + g - 1) / g;
  QuantizedRows m;
  m.format = layout.format, m.cols = cols, m.group = g, m.groups = kb;
  m.group_index = parts_group_index(rd, parts, cols, kb);
  // Values a word: 8 of 4 bits, or 4 of 8 bits (GPTQ 8-bit).
  const int64_t per = layout.values_per_word, bits = 32 / per, mask = (int64_t{1} << bits) - 1;
  static constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // row j of a word: its nibble
  auto nibble = [&](int64_t j) { return layout.interleaved_nibbles ? kAwqNibble[j] : static_cast<int>(j); };
  for (const auto& p : parts) {
    const int64_t r = p.scales.rank() == 2 ? p.scales.dim(1) : 0;
    const Shape values = layout.values_along_rows ? Shape{cols, (r + per - 1) / per} : Shape{(cols + per - 1) / per, r};
    rd.expect(p.data.rank() == 2 && p.data.dtype() == DType::i32 && p.data.shape() == values && !p.data.packed(),
              str("i32 ", values.to_string(), " words of ", bits, "-bit values, got ", p.data.describe()));
    rd.expect(p.scales.dtype() == DType::f32 && p.scales.shape() == Shape({kb, r}),
              str("scales f32 [", kb, ", rows] for groups of ", g, ", got ", p.scales.describe()));
    rd.expect(p.zero_points.defined() && p.zero_points.dtype() == DType::i32 &&
                  p.zero_points.shape() == Shape({kb, (r + per - 1) / per}),
              str("zero points i32 [", kb, ", ", (r + per - 1) / per, "] (", per, " rows a word), got ",
                  p.zero_points.defined() ? p.zero_points.describe() : std::string("none")));
    m.rows += r;
  }
  m.values.resize(static_cast<size_t>(m.rows * cols));
  m.zeros.resize(static_cast<size_t>(m.rows * kb));
  m.scales.resize(static_cast<size_t>(m.rows * kb));
  int64_t r0 = 0;
  for (const auto& p : parts) {
    const int64_t r = p.scales.dim(1), rw = (r + per - 1) / per;
    const auto* w = p.data.ptr<uint32_t>();
    const auto* z = p.zero_points.ptr<uint32_t>();
    const float* s = p.scales.ptr<float>();
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t i = 0; i < r; ++i)
        m.values[(r0 + i) * cols + c] =
            static_cast<uint8_t>(layout.values_along_rows ? (w[c * rw + i / per] >> (bits * nibble(i % per))) & mask
                                                          : (w[(c / per) * r + i] >> (bits * (c % per))) & mask);
    for (int64_t b = 0; b < kb; ++b)
      for (int64_t i = 0; i < r; ++i) {
        m.scales[(r0 + i) * kb + b] = s[b * r + i];
        m.zeros[(r0 + i) * kb + b] =
            static_cast<uint8_t>(((z[b * rw + i / per] + layout.zero_point_word_add) >> (bits * nibble(i % per))) & mask);
      }
    p.data.drop_pages();
    r0 += r;
  }
  m.dequant = layout.dequant_dtype.value_or(DType::f32);
  if (layout.format == WeightFormat::int8) {
    for (size_t i = 0; i < m.zeros.size(); ++i)
      rd.expect(m.zeros[i] == 128, str("8-bit zero point ", int(m.zeros[i]), " at row ", i / static_cast<size_t>(kb),
                                       ", group ", i % static_cast<size_t>(kb),
                                       ": linnet reads symmetric 8-bit GPTQ (every zero point 128)"));
    for (auto& v : m.values) v = static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(v) - 128));
    m.zeros.clear();
  }
  return m;
}

// MXFP4 parts (compressed-tensors' mxfp4-pack-quantized: values U8 [rows, cols/2], two E2M1
// codes a byte, the first in the low nibble; scales E8M0 [rows, cols/32]): one code a byte,
// each row's exponents beside it.
QuantizedRows read_mxfp4(const Reader& rd, const Parts& parts, const WeightLayout& layout, int64_t cols) {
  const int64_t bc = layout.block_cols, kb = (cols + bc - 1) / bc, bytes = (cols + 1) / 2;
  QuantizedRows m;
  m.format = WeightFormat::mxfp4, m.cols = cols, m.group = bc, m.groups = kb;
  for (const auto& p : parts) {
    const int64_t r = p.data.dim(0);
    rd.expect(p.data.rank() == 2 && p.data.dtype() == DType::u8 && p.data.dim(1) == bytes && !p.data.packed(),
              str("u8 [rows, ", bytes, "] bytes of two E2M1 values, got ", p.data.describe()));
    rd.expect(p.scales.dtype() == DType::f8_e8m0 && p.scales.shape() == Shape({r, kb}),
              str("scales f8_e8m0 [", r, ", ", kb, "] for blocks of ", bc, ", got ", p.scales.describe()));
    rd.expect(!p.zero_points.defined() && !p.group_index.defined(), "mxfp4 takes no zero points or group index");
    m.rows += r;
  }
  m.values.resize(static_cast<size_t>(m.rows * cols));
  m.zeros.resize(static_cast<size_t>(m.rows * kb));
  int64_t r0 = 0;
  for (const auto& p : parts) {
    const int64_t r = p.data.dim(0);
    const auto* b = p.data.ptr<uint8_t>();
    for (int64_t i = 0; i < r; ++i)
      for (int64_t c = 0; c < cols; ++c) m.values[(r0 + i) * cols + c] = (b[i * bytes + c / 2] >> (4 * (c % 2))) & 15u;
    std::memcpy(m.zeros.data() + r0 * kb, p.scales.data(), p.scales.nbytes());
    p.data.drop_pages();
    r0 += r;
  }
  return m;
}

}  // namespace

QuantizedRows read_quantized_parts(const std::vector<BackendDevice::QuantizedPart>& parts, const WeightLayout& layout,
                                   const char* backend) {
  const Reader rd{backend};
  rd.expect(!layout.dense(), str("no quantized kernels for ", layout.describe(), " weights"));
  rd.expect(!parts.empty() && parts[0].data.rank() == 2, "no parts");
  // (Packed values do not tell the matrix's columns: their parts give them as cols.)
  const bool packed_values = layout.values_per_word > 1 || layout.transposed;
  for (const auto& p : parts)
    rd.expect(!packed_values || (p.cols > 0 && p.cols == parts[0].cols), "packed parts of one width, given as cols");
  // GPTQ's and AWQ's parts, stored transposed and named after the module (4 or 8 bits).
  if (layout.transposed) return read_module_parts(rd, parts, layout, parts[0].cols);
  if (layout.format == WeightFormat::int8 && layout.values_per_word == 4)
    return read_bytes(rd, int8_words(rd, parts), layout);
  if (layout.format == WeightFormat::fp8 || layout.format == WeightFormat::int8) return read_bytes(rd, parts, layout);
  if (layout.format == WeightFormat::mxfp4) return read_mxfp4(rd, parts, layout, parts[0].cols);
  rd.expect(layout.format == WeightFormat::int4, str("no quantized kernels for ", layout.describe(), " weights"));
  return read_int4(rd, parts, layout, parts[0].cols);
}

std::vector<float> dequantize_rows(const QuantizedRows& m) {
  // MXFP4's E2M1 codes: sign, 2 exponent bits, 1 mantissa bit.
  static constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) {
      const size_t i = static_cast<size_t>(r * m.cols + c), b = static_cast<size_t>(r * m.groups + m.group_of(c));
      const uint8_t q = m.values[i];
      float w = 0;
      switch (m.format) {
        case WeightFormat::fp8: w = f8_e4m3_to_f32(q) * m.scales[b]; break;
        case WeightFormat::int8: w = static_cast<float>(static_cast<int8_t>(q)) * m.scales[b]; break;
        case WeightFormat::int4:
          w = static_cast<float>(static_cast<int>(q) - static_cast<int>(m.zeros[b])) * m.scales[b];
          break;
        case WeightFormat::mxfp4:
          w = (q & 8 ? -1.0f : 1.0f) * kE2m1[q & 7] * std::ldexp(1.0f, static_cast<int>(m.zeros[b]) - 127);
          break;
        default: throw Error(str("dequantize_rows: format ", static_cast<int>(m.format), " has no weights to dequantize"));
      }
      out[i] = round_to(m.dequant, w);
    }
  return out;
}

}  // namespace linnet
