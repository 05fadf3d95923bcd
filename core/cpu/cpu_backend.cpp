#include "core/cpu/cpu_backend.h"
#include "core/cpu/cpu_threads.h"
#include "core/cpu/group_order.h"
#include "core/cpu/packed_matmul.h"
#include "core/op_checks.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace linnet {

void cpu_fail(const char* op, const std::string& what) { throw Error(str("cpu backend ", op, ": ", what)); }

void cpu_expect_f32(const Tensor& t, const char* op, const char* arg) {
  cpu_expect(t.dtype() == DType::f32, op, str(arg, " must be f32, got ", t.describe()));
}

std::unique_ptr<Backend> make_cpu_backend() {
  // LINNET_CPU_DOT is checked when a backend is made, not at its first product.
  if (cpu::cpu_dot() == cpu::CpuDot::bf16 && !cpu::has_bf16_dot())
    throw Error("LINNET_CPU_DOT=bf16: this CPU has no AVX512_BF16 dot product (unset it, or f32)");
  return std::make_unique<CpuBackend>();
}

// ---- the ops of core/backend_op_list.h: the shared checks, then each op's own ---------------
#define LINNET_ARGS(...) __VA_ARGS__
#define LINNET_OP(name, label, params, args)        \
  void CpuBackend::name params {                     \
    op_checks::name("cpu backend", LINNET_ARGS args); \
    name##_op args;                                  \
  }
#include "core/backend_op_list.h"
#undef LINNET_OP
#undef LINNET_ARGS

void CpuBackend::fill_zero(Tensor& t) { std::memset(t.data(), 0, t.nbytes()); }

int64_t CpuBackend::memory_available() const { return host_memory_available(); }

void CpuBackend::copy_from_host(const Tensor& host, Tensor& dst) {
  cpu_expect(host.nbytes() == dst.nbytes() && host.dtype() == dst.dtype(), "copy_from_host",
             host.describe() + " → " + dst.describe());
  if (host.data() != dst.data()) std::memcpy(dst.data(), host.data(), host.nbytes());
}

void CpuBackend::convert_op(const Tensor& src, Tensor& dst) {
  cpu_expect(src.numel() == dst.numel(), "convert", src.describe() + " → " + dst.describe());
  linnet::convert(src.data(), src.dtype(), dst.data(), dst.dtype(), static_cast<size_t>(src.numel()));
}

Tensor CpuBackend::to_host(const Tensor& t) {
  if (!t.packed()) return t;
  cpu_expect(t.storage()->packed_weights == WeightFormat::dense, "to_host",
             "a quantized matrix is held packed with its scales only: " + t.describe());
  const int64_t cols = t.storage()->packed_cols;
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  cpu::unpack_rows(t.storage()->data, t.dtype(), cols, packed_row0(t), t.dim(0), out.data());
  return out;
}

namespace {
// Maps in the pages of [p, p + bytes) of a mapping ahead of reading them (advice: a kernel
// without MADV_POPULATE_READ faults them in one by one as before).
void populate(const void* p, size_t bytes) {
  const uintptr_t page = 4096, b = reinterpret_cast<uintptr_t>(p) / page * page;
  ::madvise(reinterpret_cast<void*>(b), reinterpret_cast<uintptr_t>(p) + bytes - b, MADV_POPULATE_READ);
}

// Packs `part` (row-major) into panels [first, …) of a packed matrix at dst, in pieces of
// ~8 MiB of source: a piece read from a mapped file is given back once packed, so even the
// largest matrix is never held twice (peak RSS: weights + one piece).
void pack_part(const Tensor& part, int64_t first_panel, void* dst) {
  const int64_t rows = part.dim(0), cols = part.dim(1);
  const size_t row_bytes = static_cast<size_t>(cols) * dtype_size(part.dtype());
  const int64_t panels = (rows + cpu::kPanel - 1) / cpu::kPanel;
  const int64_t step = std::max<int64_t>(1, static_cast<int64_t>((size_t{8} << 20) / (row_bytes * cpu::kPanel + 1)));
  const auto& drop = part.storage()->drop_pages;
  char* base = static_cast<char*>(dst) + static_cast<size_t>(first_panel * cpu::kPanel) * row_bytes;
  for (int64_t p0 = 0; p0 < panels; p0 += step) {
    const int64_t p1 = std::min(panels, p0 + step);
    const char* piece = static_cast<const char*>(part.data()) + p0 * cpu::kPanel * row_bytes;
    const size_t piece_bytes = static_cast<size_t>(std::min(rows, p1 * cpu::kPanel) - p0 * cpu::kPanel) * row_bytes;
    if (drop) populate(piece, piece_bytes);  // a mapped file: its pages in one call, not a fault each
    cpu::pack_panels(part.data(), part.dtype(), rows, cols, p0, p1, base);
    if (drop) drop(piece, piece_bytes);
  }
}

}  // namespace

Tensor CpuBackend::upload_matrix(const Tensor& host) {
  if (host.packed()) return host;  // already in panels (a packed file's view): used as it is
  return upload_matrix(std::vector<Tensor>{host});
}

Tensor CpuBackend::upload_matrix(const std::vector<Tensor>& parts) {
  cpu_expect(!parts.empty(), "upload_matrix", "no parts");
  const Tensor& first = parts[0];
  int64_t rows = 0;
  bool whole_panels = true;  // every part but the last a whole number of panels
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& p = parts[i];
    cpu_expect(p.rank() == 2 && !p.packed() && is_float(p.dtype()) && p.dtype() == first.dtype() && p.dim(1) == first.dim(1),
               "upload_matrix", "row-major float matrices of one dtype and width, got " + p.describe());
    if (i + 1 < parts.size() && p.dim(0) % cpu::kPanel != 0) whole_panels = false;
    rows += p.dim(0);
  }
  if (!whole_panels) return upload_matrix(stack_rows(parts));  // tiny test models
  const int64_t cols = first.dim(1), padded = (rows + cpu::kPanel - 1) / cpu::kPanel * cpu::kPanel;
  auto st = Tensor::empty({padded, cols}, first.dtype()).storage();
  int64_t panel = 0;
  for (const Tensor& p : parts) {
    pack_part(p, panel, st->data);
    panel += p.dim(0) / cpu::kPanel;
  }
  st->packed_cols = cols;
  return Tensor(st, 0, {rows, cols}, first.dtype());
}

namespace {

// The parts' one column order (QuantizedPart::group_index) as each column's group in [0,
// groups), checked; empty: the groups in order.
std::vector<int32_t> parts_group_index(const std::vector<Backend::QuantizedPart>& parts, int64_t cols, int64_t groups) {
  const Tensor& first = parts[0].group_index;
  for (const auto& p : parts)
    cpu_expect(p.group_index.defined() == first.defined(), "upload_quantized_matrix",
               "parts of one matrix with and without a group index");
  if (!first.defined()) return {};
  cpu_expect(first.dtype() == DType::i32 && first.shape() == Shape({cols}), "upload_quantized_matrix",
             str("group index i32 [", cols, "], got ", first.describe()));
  const std::vector<int32_t> v(first.ptr<int32_t>(), first.ptr<int32_t>() + cols);
  for (int64_t c = 0; c < cols; ++c)
    cpu_expect(v[static_cast<size_t>(c)] >= 0 && v[static_cast<size_t>(c)] < groups, "upload_quantized_matrix",
               str("column ", c, " in group ", v[static_cast<size_t>(c)], ", outside [0, ", groups, ")"));
  for (const auto& p : parts)
    cpu_expect(p.group_index.shape() == first.shape() &&
                   std::memcmp(p.group_index.data(), first.data(), first.nbytes()) == 0,
               "upload_quantized_matrix", "parts of one matrix with different column orders");
  return v;
}

// `packed` (a matrix packed in `order`'s columns) as the matrix of `cols` columns it is: its
// product gathers x in that order (Storage::column_gather).
Tensor with_column_order(const Tensor& packed, const cpu::GroupOrder& order, int64_t cols) {
  packed.storage()->column_gather = order.gather;
  return Tensor(packed.storage(), 0, {packed.dim(0), cols}, packed.dtype());
}

// FP8 or int8 parts stacked by rows: the values as stored, each row's scales (its block row's)
// beside it.
Tensor upload_bytes(const std::vector<Backend::QuantizedPart>& parts, const WeightLayout& layout) {
  const DType dt = layout.format == WeightFormat::fp8 ? DType::f8_e4m3 : DType::i8;
  // A block as wide as any row (per channel) is the row here.
  const int64_t cols = parts[0].data.dim(1), bc = std::min(layout.block_cols, cols), kb = (cols + bc - 1) / bc;
  cpu_expect(!parts[0].group_index.defined(), "upload_quantized_matrix",
             str("a group index that reorders ", layout.describe(), " columns is not read"));
  int64_t rows = 0;
  for (const auto& p : parts) {
    const Shape want = {(p.data.dim(0) + layout.block_rows - 1) / layout.block_rows, kb};
    cpu_expect(p.data.rank() == 2 && p.data.dtype() == dt && p.data.dim(1) == cols && !p.data.packed(),
               "upload_quantized_matrix", str(dtype_name(dt), " row-major matrices of one width, got ", p.data.describe()));
    // (One scale for the whole matrix may come as [1].)
    cpu_expect(p.scales.dtype() == DType::f32 &&
                   (p.scales.shape() == want || (p.scales.shape() == Shape{1} && want == Shape({1, 1}))),
               "upload_quantized_matrix",
               str("scales f32 ", want.to_string(), " for ", p.data.describe(), " in ", layout.describe(), " blocks, got ",
                   p.scales.describe()));
    rows += p.data.dim(0);
  }
  Tensor q = Tensor::empty({rows, cols}, dt), row_scales = Tensor::empty({rows, kb}, DType::f32);
  int64_t r0 = 0;
  for (const auto& p : parts) {
    std::memcpy(q.ptr<uint8_t>() + r0 * cols, p.data.data(), p.data.nbytes());
    const float* s = p.scales.ptr<float>();
    for (int64_t r = 0; r < p.data.dim(0); ++r)
      std::memcpy(row_scales.ptr<float>() + (r0 + r) * kb, s + (r / layout.block_rows) * kb, kb * sizeof(float));
    p.data.drop_pages();
    r0 += p.data.dim(0);
  }
  const int64_t padded = (rows + cpu::kPanel - 1) / cpu::kPanel * cpu::kPanel;
  auto st = Tensor::empty({static_cast<int64_t>(cpu::packed_fp8_bytes(rows, cols, bc))}, dt).storage();
  cpu::pack_fp8(q.ptr<uint8_t>(), row_scales.ptr<float>(), rows, cols, bc, st->data);
  st->packed_cols = cols;
  st->packed_weights = layout.format;
  st->packed_block_cols = bc;
  st->activations = layout.activations;
  if (layout.activations.stored) {
    // Static: one input_scale rounds the matrix's input, so its parts (q|k|v: one input, one
    // calibration) must have the same one.
    for (const auto& p : parts)
      cpu_expect(p.input_scale.defined() && p.input_scale.numel() == 1 && p.input_scale.dtype() == DType::f32 &&
                     p.input_scale.ptr<float>()[0] == parts[0].input_scale.ptr<float>()[0],
                 "upload_quantized_matrix",
                 str("parts of one matrix with static activations need one input_scale each, the same, got ",
                     p.input_scale.defined() ? p.input_scale.describe() : std::string("none")));
    st->activations.scale = parts[0].input_scale.ptr<float>()[0];
  }
  st->packed_rows = padded;
  st->packed_dequant = layout.dequant_dtype.value_or(DType::f32);
  return Tensor(st, 0, {rows, cols}, dt);
}

// rows × cols 4-bit values (one a byte, 0…15), their scales and zero points [rows, ⌈cols/g⌉],
// packed for the int4 kernels; each weight rounded to `dequant` after (q − zero) · scale.
Tensor packed_int4(const std::vector<uint8_t>& q, const std::vector<float>& scales, const std::vector<uint8_t>& zeros,
                   int64_t rows, int64_t cols, int64_t g, DType dequant) {
  const int64_t padded = (rows + cpu::kPanel - 1) / cpu::kPanel * cpu::kPanel;
  auto st = Tensor::empty({static_cast<int64_t>((cpu::packed_int4_bytes(rows, cols, g) + 3) / 4)}, DType::i32).storage();
  cpu::pack_int4(q.data(), scales.data(), zeros.data(), rows, cols, g, st->data);
  st->packed_cols = cols;
  st->packed_weights = WeightFormat::int4;
  st->packed_block_cols = g;
  st->packed_rows = padded;
  st->packed_dequant = dequant;
  return Tensor(st, 0, {rows, cols}, DType::i32);
}

// int4 parts (compressed-tensors' packing: eight values a word from the low bits, each +8;
// zero points packed alike along the rows) unpacked to one value a byte, stacked by rows,
// each row's scales and zero points beside it; symmetric: zero 8 (value − 8 is the signed one).
Tensor upload_int4(const std::vector<Backend::QuantizedPart>& parts, const WeightLayout& layout, int64_t cols) {
  const int64_t g = std::min(layout.block_cols, cols), words = (cols + 7) / 8;
  // Reordered groups: the scales hold every group of the matrix, a shard's too.
  const int64_t kb = parts[0].group_index.defined() && parts[0].scales.rank() == 2 ? parts[0].scales.dim(1)
                                                                                   : (cols + g - 1) / g;
  const std::vector<int32_t> group_index = parts_group_index(parts, cols, kb);
  int64_t rows = 0;
  for (const auto& p : parts) {
    const int64_t r = p.data.dim(0);
    cpu_expect(p.data.rank() == 2 && p.data.dtype() == DType::i32 && p.data.dim(1) == words && !p.data.packed(),
               "upload_quantized_matrix", str("i32 [rows, ", words, "] words of 4-bit values, got ", p.data.describe()));
    cpu_expect(p.scales.dtype() == DType::f32 && p.scales.shape() == Shape({r, kb}), "upload_quantized_matrix",
               str("scales f32 [", r, ", ", kb, "] for groups of ", g, ", got ", p.scales.describe()));
    cpu_expect(layout.zero_point_dtype.has_value() == p.zero_points.defined(), "upload_quantized_matrix",
               str(layout.describe(), " takes ", layout.zero_point_dtype ? "zero points" : "no zero points"));
    if (p.zero_points.defined())
      cpu_expect(p.zero_points.dtype() == DType::i32 && p.zero_points.shape() == Shape({(r + 7) / 8, kb}),
                 "upload_quantized_matrix",
                 str("zero points i32 [", (r + 7) / 8, ", ", kb, "] (8 rows a word), got ", p.zero_points.describe()));
    rows += r;
  }
  std::vector<uint8_t> q(static_cast<size_t>(rows * cols)), zeros(static_cast<size_t>(rows * kb), 8);
  std::vector<float> scales(static_cast<size_t>(rows * kb));
  int64_t r0 = 0;
  for (const auto& p : parts) {
    const int64_t r = p.data.dim(0);
    const auto* w = p.data.ptr<uint32_t>();
    for (int64_t i = 0; i < r; ++i)
      for (int64_t c = 0; c < cols; ++c) q[(r0 + i) * cols + c] = (w[i * words + c / 8] >> (4 * (c % 8))) & 15u;
    std::memcpy(scales.data() + r0 * kb, p.scales.data(), p.scales.nbytes());
    if (p.zero_points.defined()) {
      const auto* z = p.zero_points.ptr<uint32_t>();
      for (int64_t i = 0; i < r; ++i)
        for (int64_t b = 0; b < kb; ++b) zeros[(r0 + i) * kb + b] = (z[(i / 8) * kb + b] >> (4 * (i % 8))) & 15u;
    }
    p.data.drop_pages();
    r0 += r;
  }
  if (group_index.empty()) return packed_int4(q, scales, zeros, rows, cols, g, DType::f32);
  const cpu::GroupOrder order = cpu::group_order(group_index, kb, g, 4);
  cpu::apply_group_order(order, rows, cols, kb, q, scales, zeros, 8);
  return with_column_order(packed_int4(q, scales, zeros, rows, order.cols(), order.sub, DType::f32), order, cols);
}

// GPTQ's and AWQ's int4 parts, stored transposed and named after the module (scales
// [groups, rows], widened to f32; zero points I32 [groups, rows/8], eight output rows a word):
//   GPTQ: qweight I32 [cols/8, rows], eight input columns a word from the low bits; v1 stores
//         zero − 1: the word add restores it, carries and all, as gptqmodel reads it.
//   AWQ:  qweight I32 [cols, rows/8], eight output rows a word, nibble k holding row 8c +
//         [0, 2, 4, 6, 1, 3, 5, 7][k] (the zero points alike), zero points as they are.
// Unpacked to the rows' values, scales and zero points, stacked by rows, packed as int4 is;
// their dequantization rounded to the layout's dequant_dtype (f16).
Tensor upload_module_parts(const std::vector<Backend::QuantizedPart>& parts, const WeightLayout& layout, int64_t cols) {
  const int64_t g = std::min(layout.block_cols, cols);
  // Reordered groups (desc_act): the scales hold every group of the matrix, a shard's too.
  const int64_t kb = parts[0].group_index.defined() && parts[0].scales.rank() == 2 ? parts[0].scales.dim(0)
                                                                                   : (cols + g - 1) / g;
  const std::vector<int32_t> group_index = parts_group_index(parts, cols, kb);
  // Values a word: 8 of 4 bits, or 4 of 8 bits (GPTQ 8-bit).
  const int64_t per = layout.values_per_word, bits = 32 / per, mask = (int64_t{1} << bits) - 1;
  static constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // row j of a word: its nibble
  auto nibble = [&](int64_t j) { return layout.interleaved_nibbles ? kAwqNibble[j] : static_cast<int>(j); };
  int64_t rows = 0;
  for (const auto& p : parts) {
    const int64_t r = p.scales.rank() == 2 ? p.scales.dim(1) : 0;
    const Shape values = layout.values_along_rows ? Shape{cols, (r + per - 1) / per} : Shape{(cols + per - 1) / per, r};
    cpu_expect(p.data.rank() == 2 && p.data.dtype() == DType::i32 && p.data.shape() == values && !p.data.packed(),
               "upload_quantized_matrix",
               str("i32 ", values.to_string(), " words of ", bits, "-bit values, got ", p.data.describe()));
    cpu_expect(p.scales.dtype() == DType::f32 && p.scales.shape() == Shape({kb, r}), "upload_quantized_matrix",
               str("scales f32 [", kb, ", rows] for groups of ", g, ", got ", p.scales.describe()));
    cpu_expect(p.zero_points.defined() && p.zero_points.dtype() == DType::i32 &&
                   p.zero_points.shape() == Shape({kb, (r + per - 1) / per}),
               "upload_quantized_matrix",
               str("zero points i32 [", kb, ", ", (r + per - 1) / per, "] (", per, " rows a word), got ",
                   p.zero_points.defined() ? p.zero_points.describe() : std::string("none")));
    rows += r;
  }
  std::vector<uint8_t> q(static_cast<size_t>(rows * cols)), zeros(static_cast<size_t>(rows * kb));
  std::vector<float> scales(static_cast<size_t>(rows * kb));
  int64_t r0 = 0;
  for (const auto& p : parts) {
    const int64_t r = p.scales.dim(1), rw = (r + per - 1) / per;
    const auto* w = p.data.ptr<uint32_t>();
    const auto* z = p.zero_points.ptr<uint32_t>();
    const float* s = p.scales.ptr<float>();
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t i = 0; i < r; ++i)
        q[(r0 + i) * cols + c] = static_cast<uint8_t>(layout.values_along_rows
                                                          ? (w[c * rw + i / per] >> (bits * nibble(i % per))) & mask
                                                          : (w[(c / per) * r + i] >> (bits * (c % per))) & mask);
    for (int64_t b = 0; b < kb; ++b)
      for (int64_t i = 0; i < r; ++i) {
        scales[(r0 + i) * kb + b] = s[b * r + i];
        zeros[(r0 + i) * kb + b] =
            static_cast<uint8_t>(((z[b * rw + i / per] + layout.zero_point_word_add) >> (bits * nibble(i % per))) & mask);
      }
    p.data.drop_pages();
    r0 += r;
  }
  // desc_act: the columns in their groups' order, x gathered so (core/cpu/group_order.h).
  cpu::GroupOrder order;
  int64_t packed_cols = cols, packed_group = g, packed_kb = kb;
  if (!group_index.empty()) {
    order = cpu::group_order(group_index, kb, g, static_cast<int>(bits));
    cpu::apply_group_order(order, rows, cols, kb, q, scales, zeros, 0);
    packed_cols = order.cols(), packed_group = order.sub, packed_kb = static_cast<int64_t>(order.group_of.size());
  }
  auto as_stored = [&](const Tensor& packed) {
    return group_index.empty() ? packed : with_column_order(packed, order, cols);
  };
  if (layout.format == WeightFormat::int8) {
    // 8 bits: the int8 kernels' signed bytes q − 128, every zero point 128 (symmetric; the config
    // refuses sym false, a file that holds another zero is refused here).
    // (After any reordering the zero points are a sub-group's: the error names its stored group.)
    for (size_t i = 0; i < zeros.size(); ++i)
      cpu_expect(zeros[i] == 128, "upload_quantized_matrix",
                 str("8-bit zero point ", int(zeros[i]), " at row ", i / static_cast<size_t>(packed_kb), ", group ",
                     group_index.empty() ? static_cast<int64_t>(i % static_cast<size_t>(packed_kb))
                                         : order.group_of[i % static_cast<size_t>(packed_kb)],
                     ": linnet reads symmetric 8-bit GPTQ (every zero point 128)"));
    Tensor bytes = Tensor::empty({rows, packed_cols}, DType::i8), sc = Tensor::empty({rows, packed_kb}, DType::f32);
    for (size_t i = 0; i < q.size(); ++i) bytes.ptr<int8_t>()[i] = static_cast<int8_t>(static_cast<int>(q[i]) - 128);
    std::memcpy(sc.data(), scales.data(), scales.size() * sizeof(float));
    WeightLayout rows_layout = layout;
    rows_layout.block_rows = 1;
    rows_layout.block_cols = packed_group;
    return as_stored(upload_bytes({Backend::QuantizedPart{bytes, sc, Tensor(), packed_cols}}, rows_layout));
  }
  return as_stored(
      packed_int4(q, scales, zeros, rows, packed_cols, packed_group, layout.dequant_dtype.value_or(DType::f32)));
}

// compressed-tensors' W8A16 parts: I32 words of four 8-bit values from the low bits, each stored
// +128, [rows, ⌈cols/4⌉] → the signed bytes [rows, cols] that int8's upload takes.
std::vector<Backend::QuantizedPart> int8_words(const std::vector<Backend::QuantizedPart>& parts) {
  std::vector<Backend::QuantizedPart> out = parts;
  for (auto& p : out) {
    const int64_t cols = p.cols, words = (cols + 3) / 4;
    cpu_expect(p.data.rank() == 2 && p.data.dtype() == DType::i32 && p.data.dim(1) == words && !p.data.packed(),
               "upload_quantized_matrix", str("i32 [rows, ", words, "] words of 8-bit values, got ", p.data.describe()));
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

// MXFP4 parts (compressed-tensors' mxfp4-pack-quantized: values U8 [rows, cols/2], two E2M1
// codes a byte, the first in the low nibble; scales E8M0 [rows, cols/32]) unpacked to one code
// a byte, stacked by rows, each row's exponents beside it.
Tensor upload_mxfp4(const std::vector<Backend::QuantizedPart>& parts, const WeightLayout& layout, int64_t cols) {
  const int64_t bc = layout.block_cols, kb = (cols + bc - 1) / bc, bytes = (cols + 1) / 2;
  int64_t rows = 0;
  for (const auto& p : parts) {
    const int64_t r = p.data.dim(0);
    cpu_expect(p.data.rank() == 2 && p.data.dtype() == DType::u8 && p.data.dim(1) == bytes && !p.data.packed(),
               "upload_quantized_matrix", str("u8 [rows, ", bytes, "] bytes of two E2M1 values, got ", p.data.describe()));
    cpu_expect(p.scales.dtype() == DType::f8_e8m0 && p.scales.shape() == Shape({r, kb}), "upload_quantized_matrix",
               str("scales f8_e8m0 [", r, ", ", kb, "] for blocks of ", bc, ", got ", p.scales.describe()));
    cpu_expect(!p.zero_points.defined() && !p.group_index.defined(), "upload_quantized_matrix",
               "mxfp4 takes no zero points or group index");
    rows += r;
  }
  std::vector<uint8_t> q(static_cast<size_t>(rows * cols)), exps(static_cast<size_t>(rows * kb));
  int64_t r0 = 0;
  for (const auto& p : parts) {
    const int64_t r = p.data.dim(0);
    const auto* b = p.data.ptr<uint8_t>();
    for (int64_t i = 0; i < r; ++i)
      for (int64_t c = 0; c < cols; ++c) q[(r0 + i) * cols + c] = (b[i * bytes + c / 2] >> (4 * (c % 2))) & 15u;
    std::memcpy(exps.data() + r0 * kb, p.scales.data(), p.scales.nbytes());
    p.data.drop_pages();
    r0 += r;
  }
  const int64_t padded = (rows + cpu::kPanel - 1) / cpu::kPanel * cpu::kPanel;
  auto st = Tensor::empty({static_cast<int64_t>((cpu::packed_mxfp4_bytes(rows, cols, bc) + 3) / 4)}, DType::i32).storage();
  cpu::pack_mxfp4(q.data(), exps.data(), rows, cols, bc, st->data);
  st->packed_cols = cols;
  st->packed_weights = WeightFormat::mxfp4;
  st->packed_block_cols = bc;
  st->packed_rows = padded;
  return Tensor(st, 0, {rows, cols}, DType::i32);
}

}  // namespace

Tensor CpuBackend::upload_quantized_matrix(const std::vector<QuantizedPart>& parts, const WeightLayout& layout) {
  cpu_expect(supports(layout.format) && !layout.dense(), "upload_quantized_matrix",
             str("no CPU kernels for ", layout.describe(), " weights"));
  cpu_expect(!parts.empty() && parts[0].data.rank() == 2, "upload_quantized_matrix", "no parts");
  // (Packed values do not tell the matrix's columns: their parts give them as cols.)
  const bool packed_values = layout.values_per_word > 1 || layout.transposed;
  for (const auto& p : parts)
    cpu_expect(!packed_values || (p.cols > 0 && p.cols == parts[0].cols), "upload_quantized_matrix",
               "packed parts of one width, given as cols");
  // GPTQ's and AWQ's parts, stored transposed and named after the module (4 or 8 bits).
  if (layout.transposed) return upload_module_parts(parts, layout, parts[0].cols);
  if (layout.format == WeightFormat::int8 && layout.values_per_word == 4) return upload_bytes(int8_words(parts), layout);
  if (layout.format == WeightFormat::fp8 || layout.format == WeightFormat::int8) return upload_bytes(parts, layout);
  if (layout.format == WeightFormat::mxfp4) return upload_mxfp4(parts, layout, parts[0].cols);
  return upload_int4(parts, layout, parts[0].cols);
}

int64_t packed_row0(const Tensor& w) {
  const size_t off = static_cast<size_t>(static_cast<const char*>(w.data()) - static_cast<const char*>(w.storage()->data));
  // (A view's offset counts its rows as Tensor::rows does: one row's span_bytes a row, of the
  // matrix's own columns, which a reordered one's packed columns may outnumber.)
  const size_t row_bytes = Tensor(w.storage(), 0, {1, w.dim(1)}, w.dtype()).span_bytes();
  cpu_expect(off % row_bytes == 0, "packed matrix", "a view that does not start on a row: " + w.describe());
  return static_cast<int64_t>(off / row_bytes);
}

void CpuBackend::embedding_op(const Tensor& weight, const Tensor& ids, Tensor& out) {
  follow_free_cores();  // every model call starts here
  cpu_expect_f32(out, "embedding", "out");
  const int64_t n = ids.numel(), w = weight.dim(1), v = weight.dim(0);
  const int32_t* id = ids.ptr<int32_t>();
  const size_t row_bytes = static_cast<size_t>(w) * dtype_size(weight.dtype());
  for (int64_t i = 0; i < n; ++i) {
    cpu_expect(id[i] >= 0 && id[i] < v, "embedding", str("id ", id[i], " outside [0, ", v, ")"));
    if (weight.packed())
      cpu::unpack_rows_f32(weight.storage()->data, weight.dtype(), w, packed_row0(weight) + id[i], 1, out.ptr<float>() + i * w);
    else
      linnet::convert(static_cast<const char*>(weight.data()) + id[i] * row_bytes, weight.dtype(),
                      out.ptr<float>() + i * w, DType::f32, static_cast<size_t>(w));
  }
}

void CpuBackend::matmul_op(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  cpu_expect_f32(x, "matmul", "x");
  const WeightFormat format = w.packed() ? w.storage()->packed_weights : WeightFormat::dense;
  cpu_expect(format != WeightFormat::dense || w.dtype() == DType::f32 || w.dtype() == DType::bf16 || w.dtype() == DType::f16,
             "matmul", str("w must be f32, bf16, f16 or an uploaded FP8, int4, int8 or MXFP4 matrix, got ", w.describe()));
  cpu_expect_f32(out, "matmul", "out");
  const int64_t n = x.dim(0), o = w.dim(0);
  if (n == 0) return;
  // A weight not uploaded with upload_matrix (a test's, an op's operand) is packed for the
  // call: the same kernel, so the same bits.
  const Tensor packed = w.packed() ? w : upload_matrix(w);
  const Storage& st = *packed.storage();
  // (A format's activation rounding, compressed-tensors' dynamic input_activations, is the
  // layer's: layers/linear.h rounds x with round_activations first.)
  const float* xs = x.ptr<float>();
  const int64_t row0 = packed_row0(packed);
  int64_t in = x.dim(1);
  thread_local std::vector<float> gathered;
  if (!st.column_gather.empty()) {  // desc_act: x's columns in the packed matrix's order
    const int64_t k = st.packed_cols;
    gathered.resize(static_cast<size_t>(n * k));
    const int32_t* from = st.column_gather.data();
#pragma omp parallel for if (n * k > 65536)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) gathered[static_cast<size_t>(r * k + j)] = from[j] < 0 ? 0.0f : xs[r * x.dim(1) + from[j]];
    xs = gathered.data(), in = k;
  }
  switch (format) {
    case WeightFormat::int4:
      cpu::packed_matmul_int4(xs, n, in, st.data, st.packed_rows, st.packed_block_cols, row0, o, out.ptr<float>(),
                              nullptr, st.packed_dequant);
      break;
    case WeightFormat::fp8:
      cpu::packed_matmul_fp8(xs, n, in, st.data, st.packed_rows, st.packed_block_cols, row0, o, out.ptr<float>());
      break;
    case WeightFormat::mxfp4:
      cpu::packed_matmul_mxfp4(xs, n, in, st.data, st.packed_rows, st.packed_block_cols, row0, o, out.ptr<float>());
      break;
    case WeightFormat::int8:
      cpu::packed_matmul_int8(xs, n, in, st.data, st.packed_rows, st.packed_block_cols, row0, o, out.ptr<float>(),
                              nullptr, st.packed_dequant);
      break;
    case WeightFormat::dense: cpu::packed_matmul(xs, n, in, st.data, w.dtype(), row0, o, out.ptr<float>()); break;
  }
  if (bias) {
    cpu_expect_f32(*bias, "matmul", "bias");
    const float* b = bias->ptr<float>();
    float* y = out.ptr<float>();
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < o; ++c) y[r * o + c] += b[c];
  }
}

namespace {
// out = x · rsqrt(mean(x²) + eps) · w for one row, accumulated in double like a careful
// reference would; f32 storage.
void norm_row(const float* x, const float* w, float eps, int64_t n, float* out) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * inv) * w[i];
}
}  // namespace

void CpuBackend::rms_norm_op(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  cpu_expect_f32(x, "rms_norm", "x");
  cpu_expect_f32(w, "rms_norm", "w");
  cpu_expect_f32(out, "rms_norm", "out");
  const int64_t n = x.dim(0), h = x.dim(1);
  for (int64_t r = 0; r < n; ++r) norm_row(x.ptr<float>() + r * h, w.ptr<float>(), eps, h, out.ptr<float>() + r * h);
}

void CpuBackend::add_rms_norm_op(Tensor& residual, const Tensor& delta, const Tensor& w, float eps,
                              Tensor& out) {
  add(residual, delta);
  rms_norm(residual, w, eps, out);
}

void CpuBackend::add_op(Tensor& x, const Tensor& y) {
  cpu_expect_f32(x, "add", "x");
  cpu_expect_f32(y, "add", "y");
  float* a = x.ptr<float>();
  const float* b = y.ptr<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

void CpuBackend::rope_heads_op(Tensor& x, int64_t head_begin, int64_t heads, int64_t head_dim, const Tensor& positions,
                            const Tensor& inv_freq, float scale) {
  cpu_expect_f32(x, "rope", "x");
  cpu_expect_f32(inv_freq, "rope", "inv_freq");
  const int64_t n = x.dim(0), width = x.dim(1), half = inv_freq.dim(inv_freq.rank() - 1), d = head_dim;
  const bool per_token = inv_freq.rank() == 2;
  const int32_t* pos = positions.ptr<int32_t>();
  float* base = x.ptr<float>();
#pragma omp parallel for if (n > 16)
  for (int64_t t = 0; t < n; ++t) {
    const float* f = inv_freq.ptr<float>() + (per_token ? t * half : 0);
    for (int64_t i = 0; i < half; ++i) {
      // Angle in f32, as Hugging Face forms it; cos/sin of that f32 value, then × the
      // attention factor in f32 (transformers scales its cos and sin tables).
      const float ang = static_cast<float>(pos[t]) * f[i];
      float c = static_cast<float>(std::cos(static_cast<double>(ang)));
      float s = static_cast<float>(std::sin(static_cast<double>(ang)));
      if (scale != 1.0f) c *= scale, s *= scale;
      for (int64_t h = head_begin; h < head_begin + heads; ++h) {
        float* v = base + t * width + h * d;
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

void CpuBackend::swiglu_op(const Tensor& gate_up, Tensor& out) {
  cpu_expect_f32(gate_up, "swiglu", "gate_up");
  cpu_expect_f32(out, "swiglu", "out");
  const int64_t n = gate_up.dim(0), inner = out.dim(1);
  const float* g = gate_up.ptr<float>();
  float* o = out.ptr<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < inner; ++i) {
      const float a = g[r * 2 * inner + i], b = g[r * 2 * inner + inner + i];
      o[r * inner + i] = a / (1.0f + std::exp(-a)) * b;
    }
}

void CpuBackend::geglu_op(const Tensor& gate_up, Tensor& out) {
  cpu_expect_f32(gate_up, "geglu", "gate_up");
  cpu_expect_f32(out, "geglu", "out");
  const int64_t n = gate_up.dim(0), inner = out.dim(1);
  const float* g = gate_up.ptr<float>();
  float* o = out.ptr<float>();
  // PyTorch's gelu(approximate="tanh"): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), in f32.
  const float beta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < inner; ++i) {
      const float a = g[r * 2 * inner + i], b = g[r * 2 * inner + inner + i];
      const float inner_v = beta * (a + kappa * a * a * a);
      o[r * inner + i] = 0.5f * a * (1.0f + std::tanh(inner_v)) * b;
    }
}

void CpuBackend::pointwise_op(Tensor& x, Pointwise op, float value) {
  cpu_expect_f32(x, "pointwise", "x");
  float* a = x.ptr<float>();
  const int64_t n = x.numel();
  switch (op) {
    case Pointwise::multiply:
      for (int64_t i = 0; i < n; ++i) a[i] *= value;
      break;
    case Pointwise::divide:
      for (int64_t i = 0; i < n; ++i) a[i] /= value;
      break;
    case Pointwise::softcap:
      for (int64_t i = 0; i < n; ++i) a[i] = std::tanh(a[i] / value) * value;
      break;
  }
}

void CpuBackend::row_amax_op(const Tensor& x, Tensor& out) {
  cpu_expect_f32(x, "row_amax", "x");
  const int64_t n = x.dim(0), w = x.dim(1);
  for (int64_t r = 0; r < n; ++r) {
    const float* v = x.ptr<float>() + r * w;
    float amax = 0;
    for (int64_t c = 0; c < w; ++c) amax = std::isnan(v[c]) || std::isnan(amax) ? NAN : std::max(amax, std::fabs(v[c]));
    out.ptr<float>()[r] = amax;
  }
}

void CpuBackend::round_activations_op(const Tensor& x, const ActivationRounding& rounding, const Tensor* row_amax,
                                      Tensor& out) {
  cpu_expect_f32(x, "round_activations", "x");
  cpu::round_activations(x.ptr<float>(), x.dim(0), x.dim(1), rounding, out.ptr<float>(),
                         row_amax ? row_amax->ptr<float>() : nullptr);
}

void CpuBackend::sum_squares_op(const Tensor& x, int64_t col_begin, int64_t cols, Tensor& out) {
  cpu_expect_f32(x, "sum_squares", "x");
  cpu_expect_f32(out, "sum_squares", "out");
  const int64_t n = x.dim(0), w = x.dim(1);
  for (int64_t r = 0; r < n; ++r) {
    const float* v = x.ptr<float>() + r * w + col_begin;
    double ss = 0;
    for (int64_t i = 0; i < cols; ++i) ss += static_cast<double>(v[i]) * v[i];
    out.ptr<float>()[r] = static_cast<float>(ss);
  }
}

void CpuBackend::rms_norm_cols_op(Tensor& x, int64_t col_begin, int64_t groups, int64_t width, const Tensor& w, float eps,
                               const Tensor* sum_sq, int64_t count) {
  cpu_expect_f32(x, "rms_norm_cols", "x");
  cpu_expect_f32(w, "rms_norm_cols", "w");
  const int64_t n = x.dim(0), xw = x.dim(1);
  const float* wt = w.ptr<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      float* v = x.ptr<float>() + r * xw + col_begin + g * width;
      double ss = 0;
      if (sum_sq) {
        ss = sum_sq->ptr<float>()[r * groups + g];
      } else {
        for (int64_t i = 0; i < width; ++i) ss += static_cast<double>(v[i]) * v[i];
      }
      const double cnt = static_cast<double>(sum_sq ? count : width);
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / cnt + eps));
      for (int64_t i = 0; i < width; ++i) v[i] = (v[i] * inv) * wt[i];
    }
}

void CpuBackend::gather_rows_op(const Tensor& src, const Tensor& index, Tensor& out) {
  // Rows of a matrix only (the shared checks allow any rank).
  cpu_expect(src.rank() == 2, "gather_rows", "src " + src.describe() + " should have rank 2");
  const int64_t m = index.numel(), w = src.dim(1);
  const int32_t* idx = index.ptr<int32_t>();
  const size_t row = static_cast<size_t>(w) * dtype_size(src.dtype());
  for (int64_t i = 0; i < m; ++i) {
    char* dst = static_cast<char*>(out.data()) + i * row;
    if (idx[i] < 0) {
      std::memset(dst, 0, row);
    } else {
      cpu_expect(idx[i] < src.dim(0), "gather_rows", str("index ", idx[i], " of ", src.describe()));
      std::memcpy(dst, static_cast<const char*>(src.data()) + idx[i] * row, row);
    }
  }
}

void CpuBackend::copy_columns_op(const Tensor& src, Tensor& dst, int64_t col_begin, int64_t cols) {
  const int64_t r = src.dim(0), ws = src.dim(1), w = dst.dim(1);
  cpu_expect(src.dtype() == dst.dtype(), "copy_columns", src.describe() + " → " + dst.describe());
  const size_t e = dtype_size(src.dtype());
  for (int64_t i = 0; i < r; ++i)
    std::memcpy(static_cast<char*>(dst.data()) + (i * w + col_begin) * e,
                static_cast<const char*>(src.data()) + i * ws * e, static_cast<size_t>(cols) * e);
}

}  // namespace linnet
