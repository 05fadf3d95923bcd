// The backend ops interface: the few operations the layers need, each on tensors that live
// on the backend's device (its memory, stream and timers: core/backend_device.h). A layer calls these and knows nothing of the device; an op knows
// nothing of models (it sees rows, columns, heads and index arrays).
//
// Conventions, shared by every backend (the CPU backend is the reference):
// - Activations ("act") are 2-D [N, W] row-major tensors of the backend's compute dtype
//   (compute_dtype(T)); weights may be any float dtype; index arrays are i32.
// - Ops run in order on the backend's stream; to_host() waits for them.
// - An index of -1 in a control array means "skip this token" where stated.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/backend_device.h"
#include "core/tensor.h"

namespace linnet {

// How the attention ops find heads inside a fused q|k|v row and the cache.
//   qkv row: q heads [0, q_heads·head_dim), then k heads, then v heads.
//   cache_k / cache_v: [cache_rows, kv_heads, max_seq, head_dim].
//   A flat slot s is page s / page_size, offset s % page_size; page p is cache row
//   p / (max_seq/page_size) at positions (p % (max_seq/page_size))·page_size + offset.
struct AttentionDims {
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_seq = 0;
  int64_t page_size = 0;
  int64_t span = 0;  // attention_cache: the call's longest position + 1 (0: not given)
  // attention_cache: the longest run of consecutive tokens on one cache row (0: not given).
  // A speed hint (a prefill chunk's tokens can share K/V reads); results never depend on it.
  int64_t row_run = 0;
  // The scores' scale (0: 1/√head_dim): q·k · scale. Gemma: query_pre_attn_scalar^−½; Granite:
  // attention_multiplier.
  float scale = 0;
  // Soft-capping of the scaled scores (0: none): s ← cap · tanh(s / cap), before the mask (Gemma 2).
  float softcap = 0;
  // A sliding window (0: none): a query at index t of its run (position t of its cache row)
  // attends the `window` keys t − window + 1 … t only, as transformers' sliding-window mask.
  int64_t window = 0;
  float score_scale() const { return scale != 0 ? scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))); }
  int64_t pages_per_row() const { return max_seq / page_size; }
  int64_t qkv_width() const { return (q_heads + 2 * kv_heads) * head_dim; }
};

class Backend : public BackendDevice {
 public:
  // dst = src converted to dst's dtype (same element count).
  virtual void convert(const Tensor& src, Tensor& dst) = 0;

  // ---- ops ----
  // out[n] = weight[ids[n]]; weight [V, W], ids [N], out [N, W].
  virtual void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) = 0;
  // out[N, Out] = x[N, In] · w[Out, In]ᵀ (+ bias[Out]); f32 accumulation.
  virtual void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) = 0;
  // out = x / sqrt(mean(x²) + eps) · w, per row; x, out [N, W], w [W].
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) = 0;
  // residual += delta; out = rms_norm(residual) (the add between blocks, fused).
  virtual void add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& w, float eps,
                            Tensor& out) = 0;
  // x += y.
  virtual void add(Tensor& x, const Tensor& y) = 0;
  // Rotate heads [head_begin, head_begin + heads) of each row of x [N, ·], heads of head_dim
  // columns, in place: the first R = 2·(inv_freq's last dim) columns of each head by angle
  // positions[n]·inv_freq[i] computed in f32, dim i pairing with i + R/2 (Hugging Face's
  // rotate_half layout); columns R … head_dim − 1 pass unchanged (partial_rotary_factor < 1).
  // inv_freq is [R/2] for every token, or [N, R/2]: each token its own (dynamic NTK,
  // longrope). cos and sin are multiplied by `scale` in f32 (yarn's and longrope's attention factor).
  virtual void rope_heads(Tensor& x, int64_t head_begin, int64_t heads, int64_t head_dim, const Tensor& positions,
                          const Tensor& inv_freq, float scale) = 0;
  // The whole head rotated, scale 1.
  void rope(Tensor& x, int64_t head_begin, int64_t heads, const Tensor& positions, const Tensor& inv_freq) {
    rope_heads(x, head_begin, heads, 2 * inv_freq.dim(inv_freq.rank() - 1), positions, inv_freq, 1.0f);
  }
  // out[N, I] = silu(gate_up[:, :I]) · gate_up[:, I:].
  virtual void swiglu(const Tensor& gate_up, Tensor& out) = 0;
  // out[N, I] = gelu_tanh(gate_up[:, :I]) · gate_up[:, I:], GELU's tanh approximation
  // (PyTorch's gelu(approximate="tanh"), Gemma's gelu_pytorch_tanh).
  virtual void geglu(const Tensor& gate_up, Tensor& out) = 0;
  // x ← x · value, x / value, or value · tanh(x / value) (soft-capping), element by element in f32.
  enum class Pointwise { multiply, divide, softcap };
  virtual void pointwise(Tensor& x, Pointwise op, float value) = 0;
  // out[n] = Σ x[n, c]² over columns [col_begin, col_begin + cols), in f32 (out [N] f32): a
  // norm's sum of squares, for a norm whose columns are split across shards (all-reduced by
  // the caller).
  virtual void sum_squares(const Tensor& x, int64_t col_begin, int64_t cols, Tensor& out) = 0;
  // An RMS norm in place over column groups: for each row and each g < groups, the columns
  // [col_begin + g·width, … + width) become x · rsqrt(ss / count + eps) · w (w [width]), where
  // ss is the group's own sum of squares (sum_sq null: count = width) or sum_sq[n·groups + g]
  // ([N·groups] f32, e.g. all-reduced across shards). q/k norms: one group per head (Qwen 3,
  // Gemma 3), or the whole projection (OLMo 2).
  virtual void rms_norm_cols(Tensor& x, int64_t col_begin, int64_t groups, int64_t width, const Tensor& w, float eps,
                             const Tensor* sum_sq, int64_t count) = 0;
  // Token n with slots[n] >= 0 stores its k and v heads of qkv [N, qkv_width] at that slot.
  virtual void kv_write(const Tensor& qkv, const AttentionDims& dims, const Tensor& slots,
                        Tensor& cache_k, Tensor& cache_v) = 0;
  // Causal attention among fresh tokens: token n (run_start[n] >= 0) attends tokens
  // run_start[n] … n of qkv (with dims.window, only the last `window` of them). out
  // [N, q_heads·head_dim]; skipped rows are left as they are. Scores scaled and soft-capped
  // as dims says.
  virtual void attention_packed(const Tensor& qkv, const AttentionDims& dims, const Tensor& run_start,
                                Tensor& out) = 0;
  // Attention over the cache: token n (rows[n] >= 0) attends positions 0 … positions[n] of
  // logical row rows[n] (with dims.window, positions[n] − window + 1 … positions[n]), found
  // through table [R, Pages] (entries are pages; pages wholly before the window are not read).
  // Skipped rows are left as they are.
  virtual void attention_cache(const Tensor& qkv, const AttentionDims& dims, const Tensor& rows,
                               const Tensor& positions, const Tensor& table, const Tensor& cache_k,
                               const Tensor& cache_v, Tensor& out) = 0;
  // out[m] = src[index[m]], or a zero row where index[m] < 0. src [N, W], out [M, W].
  virtual void gather_rows(const Tensor& src, const Tensor& index, Tensor& out) = 0;
  // dst[:, col_begin : col_begin + cols] = src[:, 0 : cols]; src [R, Ws], dst [R, W].
  virtual void copy_columns(const Tensor& src, Tensor& dst, int64_t col_begin, int64_t cols) = 0;

  // ---- mixtures of experts (layers/sparse_moe.h) ----
  // The router's probabilities: probs [N, E] f32 = softmax of each row of logits [N, E] (any
  // float dtype), in f32.
  virtual void router_softmax(const Tensor& logits, Tensor& probs) = 0;
  // Per row of probs [N, E] f32: its k largest as torch.topk picks them on the CPU, ties
  // included (core/top_k.h) — weights [N, k] f32 in that order (each divided by their sum,
  // added in that order, when `normalize`: norm_topk_prob) and experts [N, k] i32.
  virtual void top_k(const Tensor& probs, int64_t k, bool normalize, Tensor& weights, Tensor& experts) = 0;
  // Each expert's product over the rows routed to it: rows [offsets[g], offsets[g + 1]) of
  // x [M, In] times group g's rows [g·Out, (g + 1)·Out) of w [G·Out, In] (transposed) into the
  // same rows of out [M, Out]. A row's bits are those matmul gives it, however many rows its
  // group has (batch invariance). offsets: G + 1 values, non-decreasing from 0 to M.
  virtual void grouped_matmul(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets, Tensor& out) = 0;
  // The weighted sum of a token's expert outputs: out[n] = Σ_j weights[n, j] · y[rows[n, j]]
  // over its choices j in increasing experts[n, j], from zero, each product rounded to f32 and
  // then added in f32 (transformers' index_add_ of each expert's weighted rows, expert by
  // expert); a negative row is left out. y [M, H], rows and experts [N, K] i32, weights [N, K]
  // f32, out [N, H] (rounded once from the f32 sum).
  virtual void moe_combine(const Tensor& y, const Tensor& rows, const Tensor& experts, const Tensor& weights,
                           Tensor& out) = 0;

  // ---- over a vocab shard: logits [N, Vs] (any float dtype); only columns < valid are
  // real (the rest pad the last shard); global index = vocab_offset + column ----
  // Per row: max, Σ exp(logit − max), and the target's logit (0 where the target is
  // outside this shard or negative). targets [N] i32 global ids; outputs [N] f32.
  virtual void logit_stats(const Tensor& logits, int64_t valid, int64_t vocab_offset,
                           const Tensor& targets, Tensor& max, Tensor& sumexp,
                           Tensor& target_logit) = 0;
  // Per row: the largest logit and its global index (lowest on ties). value f32, index i32.
  virtual void argmax(const Tensor& logits, int64_t valid, int64_t vocab_offset, Tensor& value,
                      Tensor& index) = 0;
  // Per row b: argmax_k logits[b,k]/temperature − log(−log u(k, b, step)) (see core/philox.h).
  virtual void gumbel_max(const Tensor& logits, int64_t valid, int64_t vocab_offset, uint64_t key0,
                          uint64_t key1, int32_t step, float temperature, Tensor& value,
                          Tensor& index) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();
// Host RAM free for a new allocation: MemAvailable, or less under a cgroup memory limit.
int64_t host_memory_available();
// Number of usable CUDA devices: 0 without a GPU, without the CUDA module, or when the
// CUDA runtime fails (a driver too old for it, say); cuda_status() then says which.
int cuda_device_count();
const std::string& cuda_status();  // "" with a device
// One line about CUDA device i (name, architecture, memory, UUID, driver and runtime).
std::string cuda_device_description(int device);
// The CUDA backend on the given device; throws linnet::Error without CUDA.
std::unique_ptr<Backend> make_cuda_backend(int device);
// "cpu", "cuda", or "auto" (cuda when a GPU is found, else cpu).
std::unique_ptr<Backend> make_backend(const std::string& kind, int local_rank = 0);
// compute_dtype(weights) of a backend kind ("cpu", "cuda", "auto"), without starting it: what
// `linnet inspect` sizes by. "auto" is "cuda" when a GPU is visible.
DType backend_compute_dtype(const std::string& kind, DType weights);
// weight_dtype(t) of a backend kind, without starting it: T itself on the CPU (kept as
// stored), compute_dtype(t) on CUDA.
DType backend_weight_dtype(const std::string& kind, DType t);

}  // namespace linnet
