// The backend ops interface: the few operations the layers need (listed in
// core/backend_op_list.h), each on tensors that live on the backend's device (its memory,
// stream and timers: core/backend_device.h). A layer calls these and knows nothing of the
// device; an op knows nothing of models (it sees rows, columns, heads and index arrays).
//
// Conventions, shared by every backend (the CPU backend is the reference):
// - Activations ("act") are 2-D [N, W] row-major tensors of the backend's compute dtype
//   (compute_dtype(T)); weights may be any float dtype; index arrays are i32.
// - Ops run in order on the backend's stream; to_host() waits for them.
// - An index of -1 in a control array means "skip this token" where stated.
#pragma once
#include <optional>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/backend_device.h"
#include "core/expert_choice.h"
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
  // K and V rounded to this dtype before attention reads them (a KV cache narrower than the
  // compute dtype, --kv-cache-dtype): kv_write stores them so, and attention_packed rounds the
  // keys and values it reads from qkv the same way, so that a token's result does not depend on
  // whether its keys came from the cache or from the call. Unset: as computed.
  std::optional<DType> round_kv;
  // Attention sinks (gpt-oss): one logit per q head, f32 [q_heads] on the backend's device, that
  // joins each softmax's denominator as a key never attended — softmax over [scaled scores |
  // sink], the sink's share dropped — as transformers' eager attention computes it. Null: none.
  const Tensor* sinks = nullptr;
  float score_scale() const { return scale != 0 ? scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))); }
  int64_t pages_per_row() const { return max_seq / page_size; }
  int64_t qkv_width() const { return (q_heads + 2 * kv_heads) * head_dim; }
};

// copy_heads' geometry: for each of R tokens, each head h < heads and j < width, the value at
// src column src_begin + h·src_stride + j·step goes to dst column dst_begin + h·dst_stride + j.
// A side whose `blocks` flag is set holds head h's tokens in rows [h·R, (h + 1)·R) (head-major,
// as grouped_matmul takes them; its stride is then usually 0), else token n is row n. Multi-head
// latent attention (layers/latent_attention.h) builds its heads from parts with it: each head's
// rotary columns beside its latent query, DeepSeek's interleaved rotary pairs de-interleaved
// (step 2), the latent once more as the values, the heads to and from per-head products.
struct HeadCopy {
  int64_t src_begin = 0, src_stride = 0, step = 1;
  int64_t dst_begin = 0, dst_stride = 0;
  int64_t heads = 1, width = 0;
  bool src_blocks = false, dst_blocks = false;
  // R: the tokens, from src's rows.
  int64_t tokens(int64_t src_rows) const { return src_blocks ? (heads > 0 ? src_rows / heads : 0) : src_rows; }
};

// The shape of a Gated DeltaNet layer's linear attention (gated_delta_rule): key_heads heads of
// key_dim for the queries and keys, value_heads (a multiple of key_heads) of value_dim for the
// values; value head h reads query/key head h / (value_heads / key_heads), as transformers'
// repeat_interleave. One shard's heads: a layer split by head passes its own counts.
struct DeltaNetDims {
  int64_t key_heads = 0, key_dim = 0, value_heads = 0, value_dim = 0;
  int64_t qkv_width() const { return 2 * key_heads * key_dim + value_heads * value_dim; }
  int64_t state_values() const { return value_heads * key_dim * value_dim; }  // a row's delta-rule state
};
// The gated delta rule's aligned chunk (gated_delta_rule's positions): transformers' chunk_size.
inline constexpr int64_t kDeltaRuleChunk = 64;

// The ops (core/backend_op_list.h) on the device the backend also is (core/backend_device.h).
class Backend : public BackendDevice {
 public:
  enum class Pointwise { multiply, divide, softcap };  // pointwise's op

#define LINNET_OP(name, label, params, args) virtual void name params = 0;
#include "core/backend_op_list.h"
#undef LINNET_OP

  // rope_heads over the whole head, scale 1.
  void rope(Tensor& x, int64_t head_begin, int64_t heads, const Tensor& positions, const Tensor& inv_freq) {
    rope_heads(x, head_begin, heads, 2 * inv_freq.dim(inv_freq.rank() - 1), positions, inv_freq, 1.0f);
  }
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
