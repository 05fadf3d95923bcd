// The mixture of experts of Mixtral, Qwen3-MoE and OLMoE in place of a layer's MLP
// (transformers' *SparseMoeBlock):
//   std.nn.moe::Router<H, Experts, TopK, T>: logits = x·Wᵀ, probabilities = softmax in f32, the
//     TopK largest as torch.topk picks them (ties included), divided by their sum where the
//     family says so (norm_topk_prob; Mixtral always);
//   std.nn.moe::Expert<H, ExpertInner, T>: down(silu(gate(x)) · up(x));
//   SparseMoe: out = Σ over a token's chosen experts, in increasing expert order, of its
//     weight × that expert's output (each product rounded, then added: transformers' order).
//
// Two ways to split it over the Shards of a replica (Generics::moe_sharding, --moe-sharding):
// - tensor: every expert sliced as SwiGlu is (gate/up by ExpertInner rows, down by columns);
//   each rank runs every token's experts on its slices and the partial sums are all-reduced
//   here, as SwiGlu's are.
// - expert: each rank holds Experts/Shards whole experts. The rows of a call are split among the
//   ranks (rank s routes rows s·⌈N/S⌉…); each token's row goes to the ranks holding its chosen
//   experts and their outputs come back — an all-to-all of rows each way, here — its home rank
//   adds them in transformers' order, and the ranks' rows are all-gathered (every rank holds the
//   whole residual stream, as attention needs). A token's output has the bits it has on one
//   rank (the products are batch-invariant and the sum is in the same order).
// A token's numbers never depend on the other tokens that chose its experts (docs/numerics.md):
// every product is batch-invariant (Backend::grouped_matmul) and each sum is per token.
// Card notation (H, Inner, Experts, TopK, T, Shards): the generics table of docs/entries.md and
// its "Families" section.
#pragma once
#include <optional>
#include <vector>

#include "layers/block_options.h"
#include "layers/linear.h"
#include "layers/swiglu.h"

namespace linnet {

struct Router {
  Linear gate;  // [Experts, H], whole on every rank
  int64_t top_k = 0;
  bool normalize = false;  // norm_topk_prob
  // DeepSeek's router (none: softmax and top-k): logits in f32 from x widened to f32 and gate's
  // f32 weight — their softmax first where the choice is not by sigmoid (V2) — the experts chosen
  // as `choice` says (Backend::choose_experts), `bias` (e_score_correction_bias [Experts] f32, or
  // undefined) added to choose.
  std::optional<ExpertChoice> choice;
  Tensor bias;
  // Mistral 4 and gpt-oss: the choice's logits and softmax rounded to this dtype (T) as transformers computes
  // them in the model's dtype, gate's weight held as a matrix in T (none: DeepSeek's f32 router).
  std::optional<DType> round_to;
  // x [N, H] → weights [N, TopK] f32 and experts [N, TopK] i32 (global expert ids), on the device.
  void forward(Context& ctx, const Tensor& x, Tensor& weights, Tensor& experts) const;
};

// One expert as the card names it: views of SparseMoe's stacked matrices.
struct Expert {
  Linear gate, up, down;
};

class SparseMoe {
 public:
  Router router;
  // This rank's experts (Experts/Shards whole ones under expert sharding; every one's slices
  // under tensor sharding), `first_expert` the first one's id.
  std::vector<Expert> experts;
  Linear gate_up;  // [local experts · 2·ExpertInner', H]: expert k's gate rows, then its up rows
  Linear down;     // [local experts · H, ExpertInner']
  // gpt-oss: gate_up's rows interleaved (gate, up) per expert, the clamped SwiGLU, and each
  // expert's biases as tables — gate_up_bias [local experts, 2·ExpertInner'], down_bias [local
  // experts, H] (undefined where this rank does not add it: tensor sharding's other shards).
  std::optional<ClampedSwiglu> clamped;
  Tensor gate_up_bias, down_bias;
  // Shared experts (DeepSeek's, GLM-4.5's): one SwiGLU of SharedInner / Shards rows on every
  // rank in either sharding, its output added to the routed sum.
  std::optional<SwiGlu> shared;
  // Qwen3.5-MoE's / Qwen3-Next's shared_expert_gate [1, H] (mirrored): the shared expert's output
  // × sigmoid(x·wᵀ), a scalar a token (undefined: none).
  Linear shared_gate;
  int64_t num_experts = 0;   // Experts (all ranks)
  int64_t first_expert = 0;
  int64_t inner = 0;         // ExpertInner' : this rank's rows of each expert
  bool expert_parallel = false;

  int64_t local_experts() const { return static_cast<int64_t>(experts.size()); }
  // x [N, H] (every rank the same rows) → out [N, H] on every rank.
  void forward(Context& ctx, const Tensor& x, Tensor& out) const;

 private:
  // Every expert on this rank (one rank, or tensor sharding and its all-reduce).
  void forward_local(Context& ctx, const Tensor& x, Tensor& out) const;
  void forward_expert_parallel(Context& ctx, const Tensor& x, Tensor& out) const;
  // The local experts' SwiGLU over rows grouped by expert (offsets: local experts + 1). A format
  // that rounds a Linear's input (compressed-tensors' dynamic activations) rounds each product's
  // rows alike, per row: a row's numbers stay its own whatever its expert's other rows.
  void run_experts(Context& ctx, const Tensor& xs, const std::vector<int64_t>& offsets, Tensor& y) const;
};

}  // namespace linnet
