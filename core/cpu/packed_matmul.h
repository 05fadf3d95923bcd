// The CPU's one matrix product: out[n, o] = x[n, k] · W[o, k]ᵀ with W packed once, at load, in
// panels of 32 rows, kept in the dtype it was stored in (f32, bf16 or f16) and widened in
// registers; x and out f32.
//
// Panel p holds rows [32p, 32p + 32) as [k][32]: the 32 weights a step of the product needs
// lie in one 64-byte line (bf16, f16). The last panel is padded with zero rows. A bf16 slice
// interleaves its columns (c, c + 16) in each 32-bit word, so one shift and one mask widen it.
//
// Batch invariance by construction (docs/numerics.md): every output element is the sum, in a
// fixed order, of four f32 fused multiply-add chains, each over a fixed quarter of k in order
// from 0 — whatever the number of rows n, the register tile, the thread or the kernel
// (AVX-512, AVX2, scalar give the same bits). No split of k that depends on n.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/weight_layout.h"

namespace linnet::cpu {

constexpr int64_t kPanel = 32;

// Bytes a packed [rows, cols] matrix takes (rows rounded up to whole panels).
size_t packed_bytes(int64_t rows, int64_t cols, DType dt);
// Panels [p0, p1) of dst ← src, a row-major [rows, cols] matrix in dt (f32, bf16 or f16),
// packed in the same dtype (a caller may pack in pieces, giving each piece's source back).
void pack_panels(const void* src, DType dt, int64_t rows, int64_t cols, int64_t p0, int64_t p1, void* dst);
// Rows [row0, row0 + rows) of a packed matrix back to row-major, in its dtype (dst) or as f32.
void unpack_rows(const void* packed, DType dt, int64_t cols, int64_t row0, int64_t rows, void* dst);
void unpack_rows_f32(const void* packed, DType dt, int64_t cols, int64_t row0, int64_t rows, float* dst);

// out[n, o] = x[n, k] · W[row0 : row0 + o]ᵀ for W packed with k columns.
// kernel: one of packed_matmul_kernels() (tests run each); null: the best this CPU has.
void packed_matmul(const float* x, int64_t n, int64_t k, const void* w, DType dt, int64_t row0, int64_t o,
                   float* out, const char* kernel = nullptr);

// The dot product the CPU takes (LINNET_CPU_DOT, read once): f32 (the default: x in f32, each
// weight widened, one f32 multiply-add a product — every kernel below, the same bits); bf16 (bf16
// weights: x rounded to bf16 and two products a vdpbf16ps step, on a CPU with AVX512_BF16); int8
// (4-bit weights: x quantized to int8 per block of 32 and integer dot products, below). Each
// other than f32 is a family of bits of its own, batch invariant, within its rounding of x of
// the f32 one.
enum class CpuDot { f32, bf16, int8 };
CpuDot cpu_dot();
// Whether the kernels prefetch their weights ahead in software (LINNET_CPU_PREFETCH=1, the
// default; 0: the hardware prefetcher alone; any other value refused by name). Read once;
// inline, as the kernels ask in their inner loops.
bool read_cpu_prefetch();
inline bool cpu_prefetch() {
  static const bool on = read_cpu_prefetch();
  return on;
}
bool has_bf16_dot();
// packed_matmul of bf16 weights by the bf16 dot product (throws where the CPU has none).
void packed_matmul_bf16_dot(const float* x, int64_t n, int64_t k, const void* w, int64_t row0, int64_t o, float* out);

// ---- FP8 E4M3 weights with block scales (core/cpu/packed_matmul_8bit.cpp) ----
// Kept as stored: panels of 32 rows × k bytes ([k][32], as above), then each panel's scales
// [⌈k/block_cols⌉][32] f32, one per row and column block (a block's scale repeated on each of
// its rows: any block height, fused parts stacked by rows). Weight (o, t) is
// e4m3(q[o, t]) · scale[o, t / block_cols] in f32 — one rounding, as the format's own
// dequantization — and the product is the f32 path's on those weights, the same bits.
size_t packed_fp8_bytes(int64_t rows, int64_t cols, int64_t block_cols);
// q: row-major [rows, cols] E4M3 bytes; row_scales: [rows, ⌈cols/block_cols⌉] f32.
void pack_fp8(const uint8_t* q, const float* row_scales, int64_t rows, int64_t cols, int64_t block_cols, void* dst);
// Rows [row0, row0 + rows) of a packed FP8 matrix (padded_rows: its rows rounded up to whole
// panels) as f32 weights. dequant: the dtype each dequantized weight is rounded to (f32: none
// more; bf16 or f16: compressed-tensors' on a model of that dtype, in its scales' dtype).
void unpack_rows_fp8_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                         int64_t rows, float* dst, DType dequant = DType::f32);
void packed_matmul_fp8(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows, int64_t block_cols,
                       int64_t row0, int64_t o, float* out, const char* kernel = nullptr, DType dequant = DType::f32);

// ---- int8 weights with row or group scales (packed_matmul_8bit.cpp) ----
// Packed as FP8 is (pack_fp8 on the bytes, packed_fp8_bytes): weight (o, t) is
// int8(q[o, t]) · scale[o, t / block_cols] in f32 — one rounding, as compressed-tensors'
// dequantization — and the product is the f32 path's on those weights, the same bits.
// dequant: the dtype each dequantized weight is rounded to (f32: none more; f16: GPTQ 8-bit's;
// bf16 or f16: compressed-tensors' on a model of that dtype).
void unpack_rows_int8_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                          int64_t rows, float* dst, DType dequant = DType::f32);
void packed_matmul_int8(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows, int64_t block_cols,
                        int64_t row0, int64_t o, float* out, const char* kernel = nullptr, DType dequant = DType::f32);

// ---- 4-bit integer weights with group scales and zero points (packed_matmul_4bit.cpp) ----
// Kept at 4 bits: panels of 32 rows, each step 16 bytes (row j in the low nibble of byte j,
// row j + 16 in its high one), then every panel's scales [⌈k/block_cols⌉][32] f32, then its
// zero points [⌈k/block_cols⌉][32] u8. Weight (o, t) is (q − zero) · scale in f32, q and zero
// in 0…15 (compressed-tensors' signed values and zero points +8, symmetric: zero 8) — one
// rounding, as the format's own dequantization — and the product is the f32 path's on them.
size_t packed_int4_bytes(int64_t rows, int64_t cols, int64_t block_cols);
// q: row-major [rows, cols], one value 0…15 a byte; row_scales, row_zeros: [rows, ⌈cols/block_cols⌉].
void pack_int4(const uint8_t* q, const float* row_scales, const uint8_t* row_zeros, int64_t rows, int64_t cols,
               int64_t block_cols, void* dst);
// dequant: the dtype each dequantized weight is rounded to (f32: none more; f16: GPTQ's; bf16
// or f16: compressed-tensors' on a model of that dtype).
void unpack_rows_int4_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                          int64_t rows, float* dst, DType dequant = DType::f32);
void packed_matmul_int4(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows, int64_t block_cols,
                        int64_t row0, int64_t o, float* out, const char* kernel = nullptr, DType dequant = DType::f32);

// ---- MXFP4: E2M1 values with E8M0 scales per block of 32 columns (packed_matmul_4bit.cpp) ----
// int4's panels of nibbles, then every panel's exponents [⌈k/block_cols⌉][32] u8. Weight (o, t)
// is e2m1(q[o, t]) · 2^(e − 127), exact in f32; the product is the f32 path's on them.
size_t packed_mxfp4_bytes(int64_t rows, int64_t cols, int64_t block_cols);
// q: row-major [rows, cols], one E2M1 code (0…15) a byte; row_exps: [rows, ⌈cols/block_cols⌉] E8M0.
void pack_mxfp4(const uint8_t* q, const uint8_t* row_exps, int64_t rows, int64_t cols, int64_t block_cols, void* dst);
void unpack_rows_mxfp4_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                           int64_t rows, float* dst);
void packed_matmul_mxfp4(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows, int64_t block_cols,
                         int64_t row0, int64_t o, float* out, const char* kernel = nullptr);

// ---- 4- and 8-bit integer weights by integer dot products (LINNET_CPU_DOT=int8; packed_matmul_int_dot.cpp) ----
// Each row of x is quantized per block of 32 columns as llama.cpp's Q8_0 is: d = amax|x| / 127,
// q = round(x · (1/d)) to nearest even, in ±127 (d = 0: q = 0). Output (r, o) is then, over
// the blocks b in order, acc = fma(float(v_b), scale · d_b, acc) with v_b the exact integer
// Σ (w − zero) · q over the block (int4: w 0…15 and its zero point; int8: w, no zero point;
// MXFP4: 2·e2m1, scale 2^(e − 127) and d_b / 2). The same operations for every n, tile and kernel: batch invariant;
// against the f32 path it differs by the rounding of x (a relative 1/254 of a block's amax).
// The weights take their own layout (int_dot_layout): within a panel, each 32 columns are 512
// bytes, 128 for each 8 rows, 32 for each 8 columns, 4 a row, whose low nibbles are columns 0…3
// and high ones 4…7; scales, zero points and exponents as in the layouts above (the same bytes).
struct Q8Rows {
  int64_t k = 0;
  std::vector<int8_t> q;     // [n, k]
  std::vector<float> d;      // [n, k / 32]
  std::vector<int32_t> sum;  // [n, k / 32]: Σ q over the block
};
void quantize_rows_q8(const float* x, int64_t n, int64_t k, Q8Rows& out);
// Whether a product of k columns in groups of block_cols can take the integer path (whole blocks
// of 32), and whether this process packs and multiplies such matrices by it (LINNET_CPU_DOT=int8).
bool int_dot_fits(int64_t k, int64_t block_cols);
bool int_dot_layout(int64_t k, int64_t block_cols);
void pack_int4_dot(const uint8_t* q, const float* row_scales, const uint8_t* row_zeros, int64_t rows, int64_t cols,
                   int64_t block_cols, void* dst);
void pack_mxfp4_dot(const uint8_t* q, const uint8_t* row_exps, int64_t rows, int64_t cols, int64_t block_cols, void* dst);
// int8 weights (packed_fp8_bytes): within a panel, each 32 columns are 1024 bytes, 256 for each
// 8 rows, 32 for each 4 columns, 4 a row.
void pack_int8_dot(const int8_t* q, const float* row_scales, int64_t rows, int64_t cols, int64_t block_cols, void* dst);
void unpack_rows_int8_dot_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                              int64_t rows, float* dst);
void packed_matmul_int8_dot(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows, int64_t block_cols,
                            int64_t row0, int64_t o, float* out, const char* kernel = nullptr);
void unpack_rows_int4_dot_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                              int64_t rows, float* dst);
void unpack_rows_mxfp4_dot_f32(const void* packed, int64_t padded_rows, int64_t cols, int64_t block_cols, int64_t row0,
                               int64_t rows, float* dst);
// kernel: one of int_dot_kernels() ("avx512vnni", "avxvnni", "avx2", "scalar": the same bits);
// null: the best here.
void packed_matmul_int4_dot(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows, int64_t block_cols,
                            int64_t row0, int64_t o, float* out, const char* kernel = nullptr);
void packed_matmul_mxfp4_dot(const float* x, int64_t n, int64_t k, const void* w, int64_t padded_rows,
                             int64_t block_cols, int64_t row0, int64_t o, float* out, const char* kernel = nullptr);
std::vector<const char*> int_dot_kernels();

// x [n, k] rounded and back as compressed-tensors' dynamic activations are, per row (group −1)
// or per `group` columns of a row: FP8 s = amax|x| / 448, x' = e4m3(clamp(x / s, ±448)) · s;
// int8 s = amax|x| / 127.5, x' = round(clamp(x / s, −128, 127)) · s; ties to even; s = 2⁻²³
// where amax is 0. Rows are independent: batch invariant.
// row_amax (per row only): each row's amax given (all-reduced across shards) instead of its own.
void round_activations(const float* x, int64_t n, int64_t k, const ActivationRounding& r, float* out,
                       const float* row_amax = nullptr);
// The E4M3 value nearest v (|v| ≤ 448), ties to even, as f32.
float round_to_e4m3(float v);

// The kernel packed_matmul runs here: "avx512f", "avx2+fma" or "scalar"; all of them, best first.
const char* packed_matmul_kernel();
std::vector<const char*> packed_matmul_kernels();

}  // namespace linnet::cpu
