#include "core/cpu/cpu_backend.h"
#include "core/cpu/cpu_threads.h"
#include "core/cpu/group_order.h"
#include "core/cpu/packed_matmul.h"
#include "core/op_checks.h"
#include "core/quantized_parts.h"

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
  // LINNET_CPU_DOT and LINNET_CPU_PREFETCH are checked when a backend is made, not at its first
  // product.
  if (cpu::cpu_dot() == cpu::CpuDot::bf16 && !cpu::has_bf16_dot())
    throw Error("LINNET_CPU_DOT=bf16: this CPU has no AVX512_BF16 dot product (unset it, or f32)");
  cpu::cpu_prefetch();
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

// Rows of one value a byte, scales and zero points [rows, groups] (zero points may be empty) in
// the packed matrix's order: with a group index (GPTQ's desc_act, compressed-tensors' actorder
// "group"), the columns put in their groups' order and x gathered so (core/cpu/group_order.h,
// Storage::column_gather); `pad` is a padded column's value where there are no zero points.
struct InGroupOrder {
  cpu::GroupOrder order;  // empty gather: the stored order
  int64_t cols, group, groups;
};
InGroupOrder put_in_group_order(QuantizedRows& m, int bits, uint8_t pad) {
  if (m.group_index.empty()) return {{}, m.cols, m.group, m.groups};
  cpu::GroupOrder order = cpu::group_order(m.group_index, m.groups, m.group, bits);
  cpu::apply_group_order(order, m.rows, m.cols, m.groups, m.values, m.scales, m.zeros, pad);
  const int64_t cols = order.cols(), sub = order.sub, kb = static_cast<int64_t>(order.group_of.size());
  return {std::move(order), cols, sub, kb};
}

// `packed` (a matrix packed in `order`'s columns) as the matrix of `cols` columns it is: its
// product gathers x in that order (Storage::column_gather).
Tensor as_stored(const Tensor& packed, const InGroupOrder& o, int64_t cols) {
  if (o.order.gather.empty()) return packed;
  packed.storage()->column_gather = o.order.gather;
  return Tensor(packed.storage(), 0, {packed.dim(0), cols}, packed.dtype());
}

// FP8 or int8 rows (GPTQ 8-bit reordered too): the values as stored, each row's scales beside them.
Tensor pack_bytes(QuantizedRows& m) {
  const DType dt = m.format == WeightFormat::fp8 ? DType::f8_e4m3 : DType::i8;
  const InGroupOrder o = put_in_group_order(m, 8, 0);
  const int64_t padded = (m.rows + cpu::kPanel - 1) / cpu::kPanel * cpu::kPanel;
  auto st = Tensor::empty({static_cast<int64_t>(cpu::packed_fp8_bytes(m.rows, o.cols, o.group))}, dt).storage();
  if (m.format == WeightFormat::int8 && cpu::int_dot_layout(o.cols, o.group))  // (LINNET_CPU_DOT=int8)
    cpu::pack_int8_dot(reinterpret_cast<const int8_t*>(m.values.data()), m.scales.data(), m.rows, o.cols, o.group,
                       st->data);
  else
    cpu::pack_fp8(m.values.data(), m.scales.data(), m.rows, o.cols, o.group, st->data);
  st->packed_cols = o.cols;
  st->packed_weights = m.format;
  st->packed_block_cols = o.group;
  st->activations = m.activations;
  st->packed_rows = padded;
  st->packed_dequant = m.dequant;
  return as_stored(Tensor(st, 0, {m.rows, o.cols}, dt), o, m.cols);
}

// int4 rows (0…15 a byte) with their scales and zero points, packed for the int4 kernels; each
// weight rounded to m.dequant after (q − zero) · scale.
Tensor pack_int4(QuantizedRows& m) {
  const InGroupOrder o = put_in_group_order(m, 4, 8);
  const int64_t padded = (m.rows + cpu::kPanel - 1) / cpu::kPanel * cpu::kPanel;
  auto st =
      Tensor::empty({static_cast<int64_t>((cpu::packed_int4_bytes(m.rows, o.cols, o.group) + 3) / 4)}, DType::i32).storage();
  // (LINNET_CPU_DOT=int8: the integer dot products' layout, which matmul reads by the same rule.)
  if (cpu::int_dot_layout(o.cols, o.group))
    cpu::pack_int4_dot(m.values.data(), m.scales.data(), m.zeros.data(), m.rows, o.cols, o.group, st->data);
  else
    cpu::pack_int4(m.values.data(), m.scales.data(), m.zeros.data(), m.rows, o.cols, o.group, st->data);
  st->packed_cols = o.cols;
  st->packed_weights = WeightFormat::int4;
  st->packed_block_cols = o.group;
  st->packed_rows = padded;
  st->packed_dequant = m.dequant;
  return as_stored(Tensor(st, 0, {m.rows, o.cols}, DType::i32), o, m.cols);
}

// MXFP4 rows (one E2M1 code a byte), each row's exponents beside them.
Tensor pack_mxfp4(const QuantizedRows& m) {
  const int64_t padded = (m.rows + cpu::kPanel - 1) / cpu::kPanel * cpu::kPanel;
  auto st =
      Tensor::empty({static_cast<int64_t>((cpu::packed_mxfp4_bytes(m.rows, m.cols, m.group) + 3) / 4)}, DType::i32).storage();
  if (cpu::int_dot_layout(m.cols, m.group))
    cpu::pack_mxfp4_dot(m.values.data(), m.zeros.data(), m.rows, m.cols, m.group, st->data);
  else
    cpu::pack_mxfp4(m.values.data(), m.zeros.data(), m.rows, m.cols, m.group, st->data);
  st->packed_cols = m.cols;
  st->packed_weights = WeightFormat::mxfp4;
  st->packed_block_cols = m.group;
  st->packed_rows = padded;
  return Tensor(st, 0, {m.rows, m.cols}, DType::i32);
}

}  // namespace

Tensor CpuBackend::upload_quantized_matrix(const std::vector<QuantizedPart>& parts, const WeightLayout& layout) {
  cpu_expect(supports(layout.format) && !layout.dense(), "upload_quantized_matrix",
             str("no CPU kernels for ", layout.describe(), " weights"));
  QuantizedRows m = read_quantized_parts(parts, layout, "cpu backend");
  switch (m.format) {
    case WeightFormat::fp8:
    case WeightFormat::int8: return pack_bytes(m);
    case WeightFormat::mxfp4: return pack_mxfp4(m);
    default: return pack_int4(m);
  }
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
  // (A format's activation rounding, compressed-tensors' dynamic input_activations, is
  // matmul_rounded's, which layers/linear.h calls for such a matrix.)
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
      if (cpu::int_dot_layout(in, st.packed_block_cols)) {
        cpu::packed_matmul_int4_dot(xs, n, in, st.data, st.packed_rows, st.packed_block_cols, row0, o, out.ptr<float>());
        break;
      }
      cpu::packed_matmul_int4(xs, n, in, st.data, st.packed_rows, st.packed_block_cols, row0, o, out.ptr<float>(),
                              nullptr, st.packed_dequant);
      break;
    case WeightFormat::fp8:
      cpu::packed_matmul_fp8(xs, n, in, st.data, st.packed_rows, st.packed_block_cols, row0, o, out.ptr<float>(),
                             nullptr, st.packed_dequant);
      break;
    case WeightFormat::mxfp4:
      if (cpu::int_dot_layout(in, st.packed_block_cols)) {
        cpu::packed_matmul_mxfp4_dot(xs, n, in, st.data, st.packed_rows, st.packed_block_cols, row0, o, out.ptr<float>());
        break;
      }
      cpu::packed_matmul_mxfp4(xs, n, in, st.data, st.packed_rows, st.packed_block_cols, row0, o, out.ptr<float>());
      break;
    case WeightFormat::int8:
      if (cpu::int_dot_layout(in, st.packed_block_cols)) {
        cpu::packed_matmul_int8_dot(xs, n, in, st.data, st.packed_rows, st.packed_block_cols, row0, o, out.ptr<float>());
        break;
      }
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

void CpuBackend::swiglu_clamped_op(const Tensor& gate_up, Tensor& out, float alpha, float limit) {
  cpu_expect_f32(gate_up, "swiglu_clamped", "gate_up");
  cpu_expect_f32(out, "swiglu_clamped", "out");
  const int64_t n = gate_up.dim(0), inner = out.dim(1);
  const float* g = gate_up.ptr<float>();
  float* o = out.ptr<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < inner; ++i) {
      // transformers' GptOssExperts._apply_gate, in f32: torch's clamp and sigmoid (1 / (1 + e^−x)).
      const float a = std::min(g[r * 2 * inner + 2 * i], limit);
      const float b = std::clamp(g[r * 2 * inner + 2 * i + 1], -limit, limit);
      const float glu = a * (1.0f / (1.0f + std::exp(-(a * alpha))));
      o[r * inner + i] = (b + 1.0f) * glu;
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

void CpuBackend::sigmoid_mul_op(Tensor& x, const Tensor& gate) {
  cpu_expect_f32(x, "sigmoid_mul", "x");
  cpu_expect_f32(gate, "sigmoid_mul", "gate");
  const int64_t n = x.dim(0), w = x.dim(1), groups = gate.dim(1), per = w / groups;
  float* a = x.ptr<float>();
  const float* g = gate.ptr<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < w; ++j) a[r * w + j] *= 1.0f / (1.0f + std::exp(-g[r * groups + j / per]));
}

void CpuBackend::scale_by_position_op(Tensor& x, int64_t col_begin, int64_t cols, const Tensor& positions, float beta,
                                      int64_t period) {
  cpu_expect_f32(x, "scale_by_position", "x");
  const int64_t n = x.dim(0), w = x.dim(1);
  for (int64_t r = 0; r < n; ++r) {
    const int32_t pos = positions.ptr<int32_t>()[r];
    if (pos < 0) continue;
    // torch: 1 + beta * log(1 + floor(positions / period)), each step in f32.
    const float f = 1.0f + beta * std::log(1.0f + std::floor(static_cast<float>(pos) / static_cast<float>(period)));
    float* a = x.ptr<float>() + r * w + col_begin;
    for (int64_t c = 0; c < cols; ++c) a[c] *= f;
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

void CpuBackend::matmul_rounded_op(const Tensor& x, const ActivationRounding& rounding, const Tensor* row_amax,
                                   const Tensor& w, const Tensor* bias, Tensor& out) {
  // x rounded, then the product: the two ops' bits (the integer dot products, where on, take
  // the rounded x as any other input).
  Tensor rounded = empty(x.shape(), x.dtype());
  round_activations_op(x, rounding, row_amax, rounded);
  matmul_op(rounded, w, bias, out);
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

void CpuBackend::copy_heads_op(const Tensor& src, Tensor& dst, const HeadCopy& c) {
  const int64_t r = c.tokens(src.dim(0)), ws = src.dim(1), wd = dst.dim(1);
  const int64_t e = static_cast<int64_t>(dtype_size(src.dtype()));
  const auto* s = static_cast<const char*>(src.data());
  auto* d = static_cast<char*>(dst.data());
  for (int64_t h = 0; h < c.heads; ++h)
    for (int64_t i = 0; i < r; ++i) {
      const int64_t si = c.src_blocks ? h * r + i : i, di = c.dst_blocks ? h * r + i : i;
      const char* from = s + (si * ws + c.src_begin + h * c.src_stride) * e;
      char* to = d + (di * wd + c.dst_begin + h * c.dst_stride) * e;
      if (c.step == 1) {
        std::memcpy(to, from, static_cast<size_t>(c.width * e));
        continue;
      }
      for (int64_t j = 0; j < c.width; ++j) std::memcpy(to + j * e, from + j * c.step * e, static_cast<size_t>(e));
    }
}

}  // namespace linnet
