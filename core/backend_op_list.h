// The backend's ops, listed once: core/backend.h declares them from this list, and the CPU and
// CUDA backends their overrides; core/profiling_backend.cpp times each; tests/backend_ops_test
// fails when one has no case. Each entry: LINNET_OP(name, label, (parameters), (arguments)),
// the label being the name reports give it. No include guard: the includer defines LINNET_OP
// (and undefines it after).
//
// Conventions: see core/backend.h.

// dst = src converted to dst's dtype (same element count).
LINNET_OP(convert, "convert", (const Tensor& src, Tensor& dst), (src, dst))
// out[n] = weight[ids[n]]; weight [V, W], ids [N], out [N, W].
LINNET_OP(embedding, "embedding", (const Tensor& weight, const Tensor& ids, Tensor& out), (weight, ids, out))
// out[N, Out] = x[N, In] · w[Out, In]ᵀ (+ bias[Out]); f32 accumulation.
LINNET_OP(matmul, "matmul", (const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out), (x, w, bias, out))
// out = x / sqrt(mean(x²) + eps) · w, per row; x, out [N, W], w [W].
LINNET_OP(rms_norm, "rms_norm", (const Tensor& x, const Tensor& w, float eps, Tensor& out), (x, w, eps, out))
// residual += delta; out = rms_norm(residual) (the add between blocks, fused).
LINNET_OP(add_rms_norm, "add_rms_norm",
          (Tensor& residual, const Tensor& delta, const Tensor& w, float eps, Tensor& out),
          (residual, delta, w, eps, out))
// x += y.
LINNET_OP(add, "add", (Tensor& x, const Tensor& y), (x, y))
// Rotate heads [head_begin, head_begin + heads) of each row of x [N, ·], heads of head_dim
// columns, in place: the first R = 2·(inv_freq's last dim) columns of each head by angle
// positions[n]·inv_freq[i] computed in f32, dim i pairing with i + R/2 (Hugging Face's
// rotate_half layout); columns R … head_dim − 1 pass unchanged (partial_rotary_factor < 1).
// inv_freq is [R/2] for every token, or [N, R/2]: each token its own (dynamic NTK,
// longrope). cos and sin are multiplied by `scale` in f32 (yarn's and longrope's attention factor).
LINNET_OP(rope_heads, "rope",
          (Tensor& x, int64_t head_begin, int64_t heads, int64_t head_dim, const Tensor& positions,
           const Tensor& inv_freq, float scale),
          (x, head_begin, heads, head_dim, positions, inv_freq, scale))
// out[N, I] = silu(gate_up[:, :I]) · gate_up[:, I:].
LINNET_OP(swiglu, "swiglu", (const Tensor& gate_up, Tensor& out), (gate_up, out))
// out[N, I] = gelu_tanh(gate_up[:, :I]) · gate_up[:, I:], GELU's tanh approximation
// (PyTorch's gelu(approximate="tanh"), Gemma's gelu_pytorch_tanh).
LINNET_OP(geglu, "geglu", (const Tensor& gate_up, Tensor& out), (gate_up, out))
// gpt-oss's clamped SwiGLU over interleaved columns (gate 2i, up 2i + 1, as its gate_up_proj
// stores them): g = min(gate, limit), u = clamp(up, −limit, limit), out[N, I] = (u + 1) · g ·
// sigmoid(alpha · g), in f32.
LINNET_OP(swiglu_clamped, "swiglu_clamped", (const Tensor& gate_up, Tensor& out, float alpha, float limit),
          (gate_up, out, alpha, limit))
// x[n, c] ← x[n, c] · f(n) for columns [col_begin, col_begin + cols), f(n) = 1 + beta · ln(1 +
// floor(positions[n] / period)) in f32, rounded to x's dtype first (f = 1 where positions[n] <
// 0): Llama 4's attention temperature tuning, queries scaled by how many periods their position
// has passed (Mistral 4's llama_4_scaling_beta). positions [N] i32, period ≥ 1.
LINNET_OP(scale_by_position, "scale_by_position",
          (Tensor& x, int64_t col_begin, int64_t cols, const Tensor& positions, float beta, int64_t period),
          (x, col_begin, cols, positions, beta, period))
// x ← x · value, x / value, or value · tanh(x / value) (soft-capping) (Backend::Pointwise),
// element by element in f32.
LINNET_OP(pointwise, "pointwise", (Tensor& x, Pointwise op, float value), (x, op, value))
// x[n, j] ← x[n, j] · sigmoid(gate[n, j / (W / G)]) for x [N, W], gate [N, G] (W a multiple of
// G, one dtype): an output gate per column (Qwen3.5's gated attention, G = W) or per row (its
// shared expert's gate, G = 1). In f32; a narrower dtype rounds sigmoid(gate) to it first, as
// torch's sigmoid in that dtype does.
LINNET_OP(sigmoid_mul, "sigmoid_mul", (Tensor& x, const Tensor& gate), (x, gate))
// out[n] = Σ x[n, c]² over columns [col_begin, col_begin + cols), in f32 (out [N] f32): a
// norm's sum of squares, for a norm whose columns are split across shards (all-reduced by
// the caller).
LINNET_OP(sum_squares, "sum_squares",
          (const Tensor& x, int64_t col_begin, int64_t cols, Tensor& out),
          (x, col_begin, cols, out))
// out[n] = max |x[n, c]| over the row, in f32 (out [N] f32; NaN where the row has one): a
// row-parallel layer's input amax, all-reduced by the caller so that a per-token scale spans
// every shard's columns (compressed-tensors' dynamic activations).
LINNET_OP(row_amax, "row_amax", (const Tensor& x, Tensor& out), (x, out))
// out = x rounded as a quantized layer's reference rounds its input (WeightLayout::activations,
// compressed-tensors' dynamic activations): per row (rounding.group −1) or per group of
// columns, s = amax / 448 (FP8) or amax / 127.5 (int8), 2⁻²³ where amax is 0, out = e4m3(clamp(x
// / s, ±448)) · s or round(clamp(x / s, −128, 127)) · s, ties to even. amax: each row's own, or
// row_amax [N] f32 given (per row only: the all-reduced amax of a row split across shards).
// x, out [N, W] of one dtype, computed in f32.
LINNET_OP(round_activations, "round_activations",
          (const Tensor& x, const ActivationRounding& rounding, const Tensor* row_amax, Tensor& out),
          (x, rounding, row_amax, out))
// out[N, Out] = round_activations(x, rounding, row_amax) · w[Out, In]ᵀ (+ bias): a quantized
// layer's product on its input as the format rounds it (layers/linear.h). Where the device
// multiplies the rounded codes themselves (CUDA on sm_90 under LINNET_CUDA_FP8=cublaslt: FP8 ×
// FP8 tensor cores through cuBLASLt, docs/quantization.md) the sum is the same one, rounded
// otherwise (within the f32 path's bound); elsewhere it is the two ops in turn, the same bits.
LINNET_OP(matmul_rounded, "matmul_rounded",
          (const Tensor& x, const ActivationRounding& rounding, const Tensor* row_amax, const Tensor& w,
           const Tensor* bias, Tensor& out),
          (x, rounding, row_amax, w, bias, out))
// An RMS norm in place over column groups: for each row and each g < groups, the columns
// [col_begin + g·width, … + width) become x · rsqrt(ss / count + eps) · w (w [width]), where
// ss is the group's own sum of squares (sum_sq null: count = width) or sum_sq[n·groups + g]
// ([N·groups] f32, e.g. all-reduced across shards). q/k norms: one group per head (Qwen 3,
// Gemma 3), or the whole projection (OLMo 2).
LINNET_OP(rms_norm_cols, "rms_norm_cols",
          (Tensor& x, int64_t col_begin, int64_t groups, int64_t width, const Tensor& w, float eps,
           const Tensor* sum_sq, int64_t count),
          (x, col_begin, groups, width, w, eps, sum_sq, count))
// Token n with slots[n] >= 0 stores its k and v heads of qkv [N, qkv_width] at that slot.
LINNET_OP(kv_write, "kv_write",
          (const Tensor& qkv, const AttentionDims& dims, const Tensor& slots, Tensor& cache_k, Tensor& cache_v),
          (qkv, dims, slots, cache_k, cache_v))
// Causal attention among fresh tokens: token n (run_start[n] >= 0) attends tokens
// run_start[n] … n of qkv (with dims.window, only the last `window` of them). out
// [N, q_heads·head_dim]; skipped rows are left as they are. Scores scaled and soft-capped
// as dims says.
LINNET_OP(attention_packed, "attention_packed",
          (const Tensor& qkv, const AttentionDims& dims, const Tensor& run_start, Tensor& out),
          (qkv, dims, run_start, out))
// Attention over the cache: token n (rows[n] >= 0) attends positions 0 … positions[n] of
// logical row rows[n] (with dims.window, positions[n] − window + 1 … positions[n]), found
// through table [R, Pages] (entries are pages; pages wholly before the window are not read).
// Skipped rows are left as they are.
LINNET_OP(attention_cache, "attention_cache",
          (const Tensor& qkv, const AttentionDims& dims, const Tensor& rows, const Tensor& positions,
           const Tensor& table, const Tensor& cache_k, const Tensor& cache_v, Tensor& out),
          (qkv, dims, rows, positions, table, cache_k, cache_v, out))
// out[m] = src[index[m]], or a zero row where index[m] < 0. src [N, W], out [M, W].
LINNET_OP(gather_rows, "gather_rows", (const Tensor& src, const Tensor& index, Tensor& out), (src, index, out))
// dst[:, col_begin : col_begin + cols] = src[:, 0 : cols]; src [R, Ws], dst [R, W].
LINNET_OP(copy_columns, "copy_columns",
          (const Tensor& src, Tensor& dst, int64_t col_begin, int64_t cols),
          (src, dst, col_begin, cols))
// dst[n (+ h·R), c.dst_begin + h·c.dst_stride + j] = src[n (+ h·R), c.src_begin + h·c.src_stride +
// j·c.step] for every token n < R, head h < c.heads and j < c.width, the h·R on a side whose
// rows are head blocks (core/backend.h HeadCopy); src and dst 2-D of one dtype, other values of
// dst left as they are.
LINNET_OP(copy_heads, "copy_heads", (const Tensor& src, Tensor& dst, const HeadCopy& c), (src, dst, c))
// ---- mixtures of experts (layers/sparse_moe.h) ----
// The router's probabilities: probs [N, E] f32 = softmax of each row of logits [N, E] (any
// float dtype), in f32.
LINNET_OP(router_softmax, "router_softmax", (const Tensor& logits, Tensor& probs), (logits, probs))
// Per row of probs [N, E] f32: its k largest as torch.topk picks them on the CPU, ties
// included (core/top_k.h) — weights [N, k] f32 in that order (each divided by their sum,
// added in that order, when `normalize`: norm_topk_prob) and experts [N, k] i32.
LINNET_OP(top_k, "top_k",
          (const Tensor& probs, int64_t k, bool normalize, Tensor& weights, Tensor& experts),
          (probs, k, normalize, weights, experts))
// DeepSeek's choice of experts (core/expert_choice.h), per row of logits [N, E] f32: sigmoid
// scores or the row as given, plus bias [E] f32 (e_score_correction_bias; null: none) to
// choose, group-limited, torch.topk(sorted=False) — weights [N, k] f32 and experts [N, k] i32
// in torch's order.
LINNET_OP(choose_experts, "choose_experts",
          (const Tensor& logits, const Tensor* bias, const ExpertChoice& rule, int64_t k, Tensor& weights,
           Tensor& experts),
          (logits, bias, rule, k, weights, experts))
// Each expert's product over the rows routed to it: rows [offsets[g], offsets[g + 1]) of
// x [M, In] times group g's rows [g·Out, (g + 1)·Out) of w [G·Out, In] (transposed) into the
// same rows of out [M, Out]. A row's bits are those matmul gives it, however many rows its
// group has (batch invariance). offsets: G + 1 values, non-decreasing from 0 to M.
LINNET_OP(grouped_matmul, "grouped_matmul",
          (const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets, Tensor& out),
          (x, w, offsets, out))
// The weighted sum of a token's expert outputs: out[n] = Σ_j weights[n, j] · y[rows[n, j]]
// over its choices j in increasing experts[n, j], from zero, each product rounded to f32 and
// then added in f32 (transformers' index_add_ of each expert's weighted rows, expert by
// expert); a negative row is left out. y [M, H], rows and experts [N, K] i32, weights [N, K]
// f32, out [N, H] (rounded once from the f32 sum).
LINNET_OP(moe_combine, "moe_combine",
          (const Tensor& y, const Tensor& rows, const Tensor& experts, const Tensor& weights, Tensor& out),
          (y, rows, experts, weights, out))
// ---- over a vocab shard: logits [N, Vs] (any float dtype); only columns < valid are
// real (the rest pad the last shard); global index = vocab_offset + column ----
// Per row: max, Σ exp(logit − max), and the target's logit (0 where the target is
// outside this shard or negative). targets [N] i32 global ids; outputs [N] f32.
LINNET_OP(logit_stats, "logit_stats",
          (const Tensor& logits, int64_t valid, int64_t vocab_offset, const Tensor& targets, Tensor& max,
           Tensor& sumexp, Tensor& target_logit),
          (logits, valid, vocab_offset, targets, max, sumexp, target_logit))
// Per row: the largest logit and its global index (lowest on ties). value f32, index i32.
LINNET_OP(argmax, "argmax",
          (const Tensor& logits, int64_t valid, int64_t vocab_offset, Tensor& value, Tensor& index),
          (logits, valid, vocab_offset, value, index))
// Per row b: argmax_k logits[b,k]/temperature − log(−log u(k, b, step)) (see core/philox.h).
LINNET_OP(gumbel_max, "gumbel_max",
          (const Tensor& logits, int64_t valid, int64_t vocab_offset, uint64_t key0, uint64_t key1, int32_t step,
           float temperature, Tensor& value, Tensor& index),
          (logits, valid, vocab_offset, key0, key1, step, temperature, value, index))
// ---- Gated DeltaNet (Qwen3.5, Qwen3-Next): a recurrent state per row, tokens in order ----
// The tokens of a call: rows [N] i32, the state row each token belongs to; a row's tokens come
// in position order (they may interleave with other rows'). The convolution walks a row's tokens
// one by one; the delta rule too, except over an aligned chunk (below). Either way a token's
// result depends only on its row's earlier tokens, the state and where the call's aligned chunks
// fall — never on what else shared the call.
// keep [N] i32 or undefined (none): keep[n] ≥ 0 copies token n's row's state, as it stands after
// token n, to that row of `state` (a snapshot: the engine's prefix sharing); a kept row is no
// token's row in the call.
// Causal depthwise convolution, then SiLU: x [N, C] (a token's channels), weight [C, K] (any
// float dtype), state [R, C, K − 1] f32 (the row's last K − 1 inputs: read, then advanced by each
// token); out[n, c] = silu(Σ_k weight[c, k] · w[k]) with w = the K − 1 inputs before token n
// on its row, then x[n, c]; in f32. out [N, C] may not alias x.
LINNET_OP(causal_conv1d, "causal_conv1d",
          (const Tensor& x, const Tensor& weight, const Tensor& rows, const Tensor& keep, Tensor& state, Tensor& out),
          (x, weight, rows, keep, state, out))
// The gated delta rule, as transformers' torch_recurrent_gated_delta_rule with
// use_qk_l2norm_in_kernel: qkv [N, dims.qkv_width()] (q heads, k heads, v heads: the
// convolution's output), ab [N, 2 · value_heads] (b then a: the in-projections' outputs),
// a_log, dt_bias [value_heads] (any float dtype), state [R, value_heads, key_dim, value_dim]
// f32, out [N, value_heads · value_dim]. Per token and value head h (query/key head j): q ←
// q_j / √(Σq_j² + 1e-6) / √key_dim, k ← k_j / √(Σk_j² + 1e-6), β = sigmoid(b_h), g = −exp(a_log_h)
// · softplus(a_h + dt_bias_h) (softplus(x) = x above 20); S ← S · e^g; S ← S + k ⊗ β(v_h − Sᵀk);
// out_h = Sᵀq; in f32. positions [N] i32 (each token's position in its sequence) or undefined:
// the kDeltaRuleChunk tokens of one row at positions [64c, 64c + 64), all in the call, form an
// aligned chunk, run by the chunked form (transformers' torch_chunk_gated_delta_rule: the same
// result, reassociated; a keep inside it gets the state after its token, S₀e^{G_t} + Σ_{j≤t}
// e^{G_t − G_j} k_j ⊗ δ_j); every other token (no positions: every token) by the recurrent
// form. So a token's bits depend on whether its chunk ran whole in one call: the engine cuts
// prompts at multiples of kDeltaRuleChunk (SchedulerLimits::state_chunk).
LINNET_OP(gated_delta_rule, "gated_delta_rule",
          (const Tensor& qkv, const Tensor& ab, const Tensor& a_log, const Tensor& dt_bias, const Tensor& rows,
           const Tensor& positions, const Tensor& keep, const DeltaNetDims& dims, Tensor& state, Tensor& out),
          (qkv, ab, a_log, dt_bias, rows, positions, keep, dims, state, out))
// The gated RMSNorm after the delta rule, per group of W columns: x, z, out [N, G·W], w [W];
// out = w · x / √(mean(x²) + eps) · silu(z), over each group; in f32 (a narrower dtype rounds
// x / √… and w · (that) to it first, as transformers' Qwen3NextRMSNormGated does).
LINNET_OP(rms_norm_gated, "rms_norm_gated",
          (const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& out), (x, z, w, eps, out))
