// Host-side launchers of the CUDA backend's kernels. Pointers are device pointers; dtype
// arguments are DType values as int (see cuda_common.cuh). Every launcher checks the launch
// and throws linnet::Error on failure.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/expert_choice.h"

namespace linnet::cuda {

// ---- elementwise.cu ----
void launch_convert(const void* src, int src_dt, void* dst, int dst_dt, int64_t n, cudaStream_t s);
// out[n, :] = weight[ids[n], :] converted; ids outside [0, V) give a zero row.
void launch_embedding(const void* weight, int w_dt, int64_t V, const int32_t* ids, void* out,
                      int out_dt, int64_t N, int64_t W, cudaStream_t s);
// delta == nullptr: out = rms_norm(x)·w. Otherwise x (the residual) += delta first, in place.
void launch_rms_norm(int act_dt, void* x, const void* delta, const void* w, int w_dt, float eps,
                     void* out, int64_t N, int64_t W, cudaStream_t s);
void launch_add(int dt, void* x, const void* y, int64_t n, cudaStream_t s);
// Heads of D columns; the first 2·half of each rotated; inv_freq [half] or [N, half] (per_token);
// cos and sin × scale.
void launch_rope(int dt, void* x, int64_t N, int64_t W, int64_t head_begin, int64_t heads,
                 int64_t D, int64_t half, const int32_t* positions, const void* inv_freq, int if_dt,
                 bool per_token, float scale, cudaStream_t s);
void launch_swiglu(int dt, const void* gate_up, void* out, int64_t N, int64_t I, cudaStream_t s);
void launch_geglu(int dt, const void* gate_up, void* out, int64_t N, int64_t I, cudaStream_t s);
void launch_swiglu_clamped(int dt, const void* gate_up, void* out, int64_t N, int64_t I, float alpha, float limit,
                           cudaStream_t s);
// op: 0 multiply, 1 divide, 2 soft-cap (Backend::Pointwise).
void launch_pointwise(int dt, void* x, int64_t n, int op, float value, cudaStream_t s);
// x [N, W] · sigmoid(gate [N, G]) column j by gate column j / (W / G) (Backend::sigmoid_mul).
void launch_sigmoid_mul(int dt, void* x, const void* gate, int64_t N, int64_t W, int64_t G, cudaStream_t s);
// Backend::scale_by_position over x [N, W].
void launch_scale_by_position(int dt, void* x, int64_t N, int64_t W, int64_t c0, int64_t cols, const int32_t* positions,
                              float beta, int64_t period, cudaStream_t s);
void launch_sum_squares(int dt, const void* x, int64_t N, int64_t W, int64_t c0, int64_t cols, float* out,
                        cudaStream_t s);
// max |x| of each row of x [N, W] into out [N] f32.
void launch_row_amax(int dt, const void* x, int64_t N, int64_t W, float* out, cudaStream_t s);
// x [N, W] rounded into out (same dtype) as compressed-tensors' dynamic activations: fp8 (true)
// or int8, per row (group < 0) or per `group` columns; row_amax [N] given or null; static_scale
// > 0: that scale for every element instead (static activations: the checkpoint's input_scale).
void launch_round_activations(int dt, const void* x, int64_t N, int64_t W, bool fp8, int64_t group,
                              const float* row_amax, float static_scale, void* out, cudaStream_t s);
void launch_rms_norm_cols(int dt, void* x, int64_t N, int64_t W, int64_t c0, int64_t groups, int64_t width,
                          const void* w, int wdt, float eps, const float* sum_sq, int64_t count, cudaStream_t s);
// out[m] = src[index[m]] (row_bytes each) or zeros where index[m] < 0 or >= src_rows.
void launch_gather_rows(const void* src, int64_t src_rows, const int32_t* index, void* out,
                        int64_t M, int64_t row_bytes, cudaStream_t s);
// Backend::copy_heads of elements `elem_bytes` wide (1, 2, 4 or 8) over R tokens: src rows of
// src_w values, dst rows of dst_w; a side's `blocks` flag: head h's tokens are its rows h·R + n.
void launch_copy_heads(const void* src, int64_t src_w, void* dst, int64_t dst_w, int64_t R, int64_t elem_bytes,
                       int64_t src_begin, int64_t src_stride, int64_t step, int64_t dst_begin, int64_t dst_stride,
                       int64_t heads, int64_t width, bool src_blocks, bool dst_blocks, cudaStream_t s);
// dst[:, col_begin + c] = convert(src[:, c]) for c < cols (dtypes differ).
void launch_copy_columns(const void* src, int src_dt, int64_t src_w, void* dst, int dst_dt,
                         int64_t dst_w, int64_t R, int64_t col_begin, int64_t cols,
                         cudaStream_t s);

// No padding (a launch record holds one and is compared byte by byte: core/cuda/launch_records.cuh).
struct AttnGeom {
  int64_t max_seq = 0;
  int64_t page_size = 0;
  int64_t cache_rows = 0;  // rows of cache_k / cache_v
  int64_t row_run = 0;     // AttentionDims::row_run (a speed hint)
  int64_t window = 0;      // 0: none
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  float scale = 0;         // the scores' scale (AttentionDims::score_scale())
  float softcap = 0;       // 0: none
  // The dtype code K and V are held in (--kv-cache-dtype): the cache's, which kv_write rounds to
  // and attention_cache widens from; attention_packed rounds the K and V it reads from qkv to
  // it, so a token's keys are the same values on either path. -1: the activations' dtype.
  int kv_dt = -1;
  // AttentionDims::sinks on the device: f32 [q_heads], each joining its head's softmax
  // denominator (gpt-oss); null: none.
  const float* sinks = nullptr;
};
static_assert(sizeof(AttnGeom) == 6 * 8 + 6 * 4, "AttnGeom has no padding");

void launch_kv_write(int dt, const void* qkv, int64_t N, const AttnGeom& g, const int32_t* slots,
                     void* cache_k, void* cache_v, cudaStream_t s);

// ---- matmul.cu ----
// out[N, O] = x[N, K] · w[O, K]ᵀ (+ bias[O]), any float dtypes, f32 accumulation in a fixed
// order per element whatever N (batch invariance).
void launch_matmul(const void* x, int xdt, const void* w, int wdt, const void* bias, int bdt, void* out, int odt,
                   int64_t N, int64_t K, int64_t O, cudaStream_t s);

// ---- matmul.cu and moe.cu on quantized weights (quantized_weights.cuh) ----
// A quantized matrix as the CUDA backend holds it (CudaBackend::upload_quantized_matrix: the
// rows of core/quantized_parts.h as they are, in one allocation): values row-major — FP8 and
// int8 a byte each, int4 and MXFP4 two a byte (the first in the low nibble, ⌈cols/2⌉ bytes a
// row) —, scales f32 [rows, groups] (none for MXFP4), `zeros` [rows, groups] a byte each (int4's
// zero points; MXFP4's E8M0 exponents), and where the groups are reordered each column's group.
struct QuantWeights {
  const uint8_t* values;
  const float* scales;
  const uint8_t* zeros;
  const int32_t* group_index;  // null: column c in group c / group
  int64_t cols, group, groups;
  int32_t format;  // WeightFormat's value: fp8, int4, int8, mxfp4
  int32_t dequant;  // the DType each weight is rounded to after its dequantization: f32 (none), f16, bf16
};
static_assert(sizeof(QuantWeights) == 4 * 8 + 3 * 8 + 2 * 4, "QuantWeights has no padding");
// out[N, O] = x[N, K] · w[row0 : row0 + O]ᵀ (+ bias): matmul's SIMT product on the weights as
// their format dequantizes them, the bits of the dense product on the dequantized matrix.
void launch_matmul_quantized(const void* x, int xdt, const QuantWeights& w, int64_t row0, const void* bias, int bdt,
                             void* out, int odt, int64_t N, int64_t K, int64_t O, cudaStream_t s);

// ---- matmul_tc.cu ----
// The same product on tensor cores, for x and w of one 16-bit dtype (bf16 or f16): C f32 mma
// chains over fixed ranges of k, summed in order — the same bits for any N.
struct TcChoice {
  bool tc4 = false;   // the earlier kernels (4 chains; narrow 16 × 16 blocks up to 64 rows)
  bool panel = true;  // the wide kernel walks the row tiles of a weight panel first (no bit changes)
};
bool matmul_tc_applies(int xdt, int wdt);
// f32 elements of workspace the product of N rows and O columns needs (0: none).
int64_t matmul_tc_workspace(int64_t N, int64_t O, const TcChoice& choice);
void launch_matmul_tc(const void* x, int xdt, const void* w, const void* bias, int bdt, void* out, int odt, int64_t N,
                      int64_t K, int64_t O, const TcChoice& choice, float* workspace, cudaStream_t s);

// ---- matmul_tc_quantized.cu ----
// Whether a quantized matrix's dequantized weights are values of x's dtype xdt (bf16 or f16),
// so that the tensor-core product on them is exact: the weights rounded to xdt by their format,
// or MXFP4's (exact) beside bf16.
bool matmul_tc_quantized_applies(int xdt, const QuantWeights& w);
// out[N, O] = x[N, K] · w[row0 : row0 + O]ᵀ (+ bias) by the current tensor-core family on the
// weights dequantized as they load: the dense tensor-core product's bits on the dequantized
// matrix, for any N. workspace: matmul_tc_workspace(N, O, {}) floats.
void launch_matmul_quantized_tc(const void* x, int xdt, const QuantWeights& w, int64_t row0, const void* bias, int bdt,
                                void* out, int odt, int64_t N, int64_t K, int64_t O, bool panel, float* workspace,
                                cudaStream_t s);

// ---- attention.cu ----
void launch_attention_packed(int dt, const void* qkv, int64_t N, const AttnGeom& g,
                             const int32_t* run_start, void* out, cudaStream_t s);
// attention_cache splits each token's keys [0, len) into pieces of cache_split_len(len)
// positions — a length that depends on the token's own context only (batch invariance,
// docs/numerics.md) — and combines the pieces in order. The most pieces any token of a call
// reaching positions [0, span) has, and the f32 workspace that needs (elements). split_base:
// the piece's length up to 64 pieces (LINNET_CUDA_CACHE_SPLIT; each value batch invariant).
int attention_cache_splits(int64_t span, int split_base);
int64_t attention_cache_workspace(int64_t N, const AttnGeom& g, int splits);
// prefetch: the kernel that stages K/V tiles as stored (cp.async, two tiles deep: the next
// tile loads while this one is folded) and reads them without shared-memory bank conflicts —
// the same arithmetic in the same order as the earlier kernel (prefetch false), so the same
// bits; 16-bit activations with D a multiple of 8 only (else the earlier kernel runs).
void launch_attention_cache(int dt, const void* qkv, int64_t N, const AttnGeom& g,
                            const int32_t* rows, const int32_t* positions, const int32_t* table,
                            int64_t R, int64_t pages, const void* cache_k, const void* cache_v,
                            void* out, float* workspace, int splits, bool prefetch, int split_base,
                            cudaStream_t s);

// ---- logits.cu ----
// split: each row's valid columns in row_segments(valid) pieces, one block each, then a
// kernel that combines the pieces in order (more than one block per row at batch 1). The
// pieces depend on `valid` alone, never on N (batch invariance). Argmax and Gumbel-max give
// the same (value, index) either way; the softmax statistics' sum is associated otherwise
// than the one-block kernel's (within f32 rounding). workspace: row_workspace(N, valid) floats.
int row_segments(int64_t valid);
int64_t row_workspace(int64_t N, int64_t valid);
void launch_logit_stats(const void* logits, int dt, int64_t N, int64_t Vs, int64_t valid,
                        int64_t vocab_offset, const int32_t* targets, float* max, float* sumexp,
                        float* target_logit, bool split, float* workspace, cudaStream_t s);
// gumbel == false: plain argmax. Otherwise score = logit/temperature + gumbel(key, k, row, step).
void launch_argmax(const void* logits, int dt, int64_t N, int64_t Vs, int64_t valid,
                   int64_t vocab_offset, bool gumbel, uint64_t key0, uint64_t key1, int32_t step,
                   float temperature, float* value, int32_t* index, bool split, float* workspace,
                   cudaStream_t s);

// ---- moe.cu ----
// probs [N, E] f32 = softmax of each row of logits (any float dtype), in f32.
void launch_router_softmax(const void* logits, int ldt, float* probs, int64_t N, int64_t E, cudaStream_t s);
// torch.topk's k of each row (core/top_k.h), weights divided by their sum when normalize.
// DeepSeek's choice of experts, one thread a row (core/expert_choice.h).
void launch_choose_experts(const float* logits, const float* bias, const ExpertChoice& rule, int64_t N, int64_t E,
                           int64_t k, float* weights, int32_t* experts, cudaStream_t s);
void launch_top_k(const float* probs, int64_t N, int64_t E, int64_t k, bool normalize, float* weights, int32_t* experts,
                  cudaStream_t s);
// Up to kMax groups of rows per launch: group g's rows [offsets[g], offsets[g + 1]) of x and out,
// its weight rows [(first_group + g)·O, …); its row tiles start at first_tile[g] (the grid's y).
struct GroupTiles {
  static constexpr int kMax = 128;
  int groups = 0;
  int first_group = 0;
  int64_t offsets[kMax + 1];
  int first_tile[kMax + 1];
};
int grouped_matmul_rows_per_tile();
// out rows of each group = x rows · w's group rows ᵀ; one f32 chain per element over k in order.
void launch_grouped_matmul(const void* x, int xdt, const void* w, int wdt, void* out, int odt, int64_t K, int64_t O,
                           const GroupTiles& tiles, int tile_count, cudaStream_t s);
// The same on a quantized stack of experts (row0: the first expert's first row in w).
void launch_grouped_matmul_quantized(const void* x, int xdt, const QuantWeights& w, int64_t row0, void* out, int odt,
                                     int64_t K, int64_t O, const GroupTiles& tiles, int tile_count, cudaStream_t s);
// out[n] = Σ over increasing experts[n, j] of weights[n, j] · y[rows[n, j]] (products rounded, then added).
void launch_moe_combine(const void* y, int ydt, const int32_t* rows, const int32_t* experts, const float* weights,
                        void* out, int odt, int64_t N, int64_t H, int64_t K, cudaStream_t s);

// ---- random.cu ----
// out[r, c] (rows × cols, row-major, a float dtype) = mean + scale · z(key, base + r·stride + c):
// the standard normal of core/random_normal.h, made on the device (random weights).
void launch_random_normal(void* out, int dt, int64_t rows, int64_t cols, uint64_t key, int64_t base, int64_t stride,
                          float mean, float scale, cudaStream_t s);

// ---- test_hooks.cu ----
// A kernel that keeps the stream busy for `seconds` (device clock): a planted hang for tests.
void launch_spin(double seconds, cudaStream_t s);

// ---- delta_net.cu (Gated DeltaNet; Backend::causal_conv1d, gated_delta_rule, rms_norm_gated) ----
// keep: null, or per token the state row that receives its row's state after it (−1: none).
// R: the state's rows (each gets its own blocks, which walk that row's tokens).
void launch_causal_conv1d(const void* x, int dt, const void* weight, int w_dt, const int32_t* rows, const int32_t* keep,
                          float* state, void* out, int64_t N, int64_t C, int64_t K, int64_t R, cudaStream_t s);
// positions: null (every token recurrent), or per token its position: a row's `chunk` tokens at
// positions [chunk·c, chunk·c + chunk), all in the call, run by the chunked form.
void launch_gated_delta_rule(const void* qkv, int dt, const void* ab, const void* a_log, int alog_dt,
                             const void* dt_bias, int dtb_dt, const int32_t* rows, const int32_t* positions,
                             const int32_t* keep, float* state, void* out, int64_t N, int64_t hk, int64_t dk,
                             int64_t hv, int64_t dv, int64_t R, int64_t chunk, cudaStream_t s);
void launch_rms_norm_gated(const void* x, const void* z, int dt, const void* w, int w_dt, float eps, void* out,
                           int64_t groups, int64_t W, cudaStream_t s);

}  // namespace linnet::cuda
