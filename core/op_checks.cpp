#include "core/op_checks.h"

#include <climits>
#include <cmath>

#include "core/error.h"

namespace linnet::op_checks {
namespace {

[[noreturn]] void failed(const char* backend, const char* op, const std::string& what) {
  throw Error(str(backend, " ", op, ": ", what));
}
// The message is built only when the check fails: a decode step runs hundreds of checks.
#define NEED(ok, what)                         \
  do {                                         \
    if (!(ok)) failed(k.backend, k.op, (what)); \
  } while (0)

struct Op {
  const char* backend;
  const char* op;
};

void defined(const Op& k, const char* name, const Tensor& t) { NEED(t.defined(), str(name, " is undefined")); }
void rank_is(const Op& k, const char* name, const Tensor& t, size_t r) {
  defined(k, name, t);
  NEED(t.rank() == r, str(name, " ", t.describe(), " should have rank ", r));
}
void dtype_is(const Op& k, const char* name, const Tensor& t, DType d) {
  defined(k, name, t);
  NEED(t.dtype() == d, str(name, " ", t.describe(), " should be ", dtype_name(d)));
}
// An i32 index vector of n entries.
void index_vec(const Op& k, const char* name, const Tensor& t, int64_t n) {
  dtype_is(k, name, t, DType::i32);
  NEED(t.numel() == n, str(name, " ", t.describe(), " should hold ", n, " entries"));
}
// An f32 vector of n entries.
void f32_vec(const Op& k, const char* name, const Tensor& t, int64_t n) {
  dtype_is(k, name, t, DType::f32);
  NEED(t.numel() == n, str(name, " ", t.describe(), " should hold ", n, " entries"));
}
void check_dims(const Op& k, const AttentionDims& d) {
  NEED(d.q_heads > 0 && d.kv_heads > 0 && d.q_heads % d.kv_heads == 0,
       str("q_heads ", d.q_heads, " should be a positive multiple of kv_heads ", d.kv_heads));
  NEED(d.head_dim > 0, str("head_dim ", d.head_dim, " should be positive"));
  NEED(d.window >= 0 && d.softcap >= 0, str("window ", d.window, " and softcap ", d.softcap, " must be ≥ 0"));
  if (d.sinks)
    NEED(d.sinks->defined() && d.sinks->dtype() == DType::f32 && d.sinks->rank() == 1 && d.sinks->dim(0) == d.q_heads,
         str("sinks ", d.sinks->describe(), " should be f32 [", d.q_heads, "] (one per q head)"));
}
void check_qkv(const Op& k, const AttentionDims& d, const Tensor& qkv) {
  rank_is(k, "qkv", qkv, 2);
  NEED(qkv.dim(1) == d.qkv_width(), str("qkv ", qkv.describe(), " should have width ", d.qkv_width()));
}
void check_cache(const Op& k, const AttentionDims& d, const Tensor& qkv, const Tensor& ck, const Tensor& cv) {
  NEED(d.page_size > 0 && d.max_seq > 0 && d.max_seq % d.page_size == 0,
       str("max_seq ", d.max_seq, " should be a positive multiple of page_size ", d.page_size));
  rank_is(k, "cache_k", ck, 4);
  rank_is(k, "cache_v", cv, 4);
  NEED(ck.shape() == cv.shape(), str("cache_k ", ck.describe(), " and cache_v ", cv.describe(), " differ"));
  NEED(ck.dim(1) == d.kv_heads && ck.dim(2) == d.max_seq && ck.dim(3) == d.head_dim,
       str("cache ", ck.describe(), " should be [rows, ", d.kv_heads, ", ", d.max_seq, ", ", d.head_dim, "]"));
  // (A narrower cache, --kv-cache-dtype: the dtype K and V are rounded to on every path.)
  NEED((ck.dtype() == qkv.dtype() || (d.round_kv && ck.dtype() == *d.round_kv)) && cv.dtype() == ck.dtype(),
       str("cache dtype ", dtype_name(ck.dtype()), " should match qkv ", qkv.describe(),
           d.round_kv ? str(" or the K/V rounding ", dtype_name(*d.round_kv)) : std::string()));
}
void check_attention_out(const Op& k, const AttentionDims& d, const Tensor& qkv, const Tensor& out) {
  rank_is(k, "out", out, 2);
  NEED(out.dtype() == qkv.dtype() && out.dim(0) == qkv.dim(0) && out.dim(1) == d.q_heads * d.head_dim,
       str("out ", out.describe(), " should be [", qkv.dim(0), ", ", d.q_heads * d.head_dim, "; ",
           dtype_name(qkv.dtype()), "]"));
}
void check_logits(const Op& k, const Tensor& logits, int64_t valid, int64_t vocab_offset) {
  rank_is(k, "logits", logits, 2);
  NEED(valid >= 0 && valid <= logits.dim(1), str("valid ", valid, " is outside [0, ", logits.dim(1), "]"));
  NEED(vocab_offset >= 0 && vocab_offset + valid <= INT_MAX, str("vocab_offset ", vocab_offset, " is out of range"));
}
void check_glu(const Op& k, const Tensor& gate_up, const Tensor& out) {
  rank_is(k, "gate_up", gate_up, 2);
  rank_is(k, "out", out, 2);
  NEED(out.dtype() == gate_up.dtype() && out.dim(0) == gate_up.dim(0) && gate_up.dim(1) == 2 * out.dim(1),
       str("gate_up ", gate_up.describe(), " and out ", out.describe(), " disagree"));
}

}  // namespace

void convert(const char* backend, const Tensor& src, Tensor& dst) {
  const Op k{backend, "convert"};
  defined(k, "src", src);
  defined(k, "dst", dst);
  NEED(src.numel() == dst.numel(), str("src ", src.describe(), " and dst ", dst.describe(), " differ in size"));
}

void embedding(const char* backend, const Tensor& weight, const Tensor& ids, Tensor& out) {
  const Op k{backend, "embedding"};
  rank_is(k, "weight", weight, 2);
  rank_is(k, "out", out, 2);
  index_vec(k, "ids", ids, out.dim(0));
  NEED(out.dim(1) == weight.dim(1), str("out ", out.describe(), " and weight ", weight.describe(), " differ in width"));
}

namespace {
// matmul's shapes (x [N, In], w [Out, In], out [N, Out], bias [Out]), under op k's label.
void matmul_shapes(const Op& k, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
  rank_is(k, "x", x, 2);
  rank_is(k, "w", w, 2);
  rank_is(k, "out", out, 2);
  const int64_t N = x.dim(0), In = x.dim(1), Out = w.dim(0);
  NEED(w.dim(1) == In, str("x ", x.describe(), " and w ", w.describe(), " differ in In"));
  NEED(out.dim(0) == N && out.dim(1) == Out, str("out ", out.describe(), " should be [", N, ", ", Out, "]"));
  if (bias) {
    defined(k, "bias", *bias);
    NEED(bias->numel() == Out, str("bias ", bias->describe(), " should hold ", Out, " entries"));
  }
}
// A rounding of x's rows (round_activations'), under op k's label.
void rounding_given(const Op& k, const Tensor& x, const ActivationRounding& rounding, const Tensor* row_amax) {
  NEED(rounding.any() && (rounding.group != 0 || (rounding.stored && rounding.scale > 0)),
       "no rounding given (format none, group 0 without a stored scale)");
  if (row_amax) {
    dtype_is(k, "row_amax", *row_amax, DType::f32);
    NEED(rounding.per_token() && row_amax->numel() == x.dim(0),
         str("row_amax ", row_amax->describe(), " is one value a row of x ", x.describe(), ", for per-token rounding"));
  }
}
}  // namespace

void matmul(const char* backend, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  matmul_shapes(Op{backend, "matmul"}, x, w, bias, out);
}

void rms_norm(const char* backend, const Tensor& x, const Tensor& w, float, Tensor& out) {
  const Op k{backend, "rms_norm"};
  rank_is(k, "x", x, 2);
  rank_is(k, "out", out, 2);
  defined(k, "w", w);
  NEED(out.shape() == x.shape() && out.dtype() == x.dtype(), str("out ", out.describe(), " should match x ", x.describe()));
  NEED(w.numel() == x.dim(1), str("w ", w.describe(), " should hold ", x.dim(1), " entries"));
}

void add_rms_norm(const char* backend, Tensor& residual, const Tensor& delta, const Tensor& w, float, Tensor& out) {
  const Op k{backend, "add_rms_norm"};
  rank_is(k, "residual", residual, 2);
  defined(k, "delta", delta);
  rank_is(k, "out", out, 2);
  defined(k, "w", w);
  NEED(delta.shape() == residual.shape() && delta.dtype() == residual.dtype(),
       str("delta ", delta.describe(), " should match residual ", residual.describe()));
  NEED(out.shape() == residual.shape() && out.dtype() == residual.dtype(),
       str("out ", out.describe(), " should match residual ", residual.describe()));
  NEED(w.numel() == residual.dim(1), str("w ", w.describe(), " should hold ", residual.dim(1), " entries"));
}

void add(const char* backend, Tensor& x, const Tensor& y) {
  const Op k{backend, "add"};
  defined(k, "x", x);
  defined(k, "y", y);
  NEED(x.numel() == y.numel() && x.dtype() == y.dtype(), str("y ", y.describe(), " should match x ", x.describe()));
}

void rope_heads(const char* backend, Tensor& x, int64_t head_begin, int64_t heads, int64_t head_dim,
                const Tensor& positions, const Tensor& inv_freq, float) {
  const Op k{backend, "rope"};
  rank_is(k, "x", x, 2);
  defined(k, "inv_freq", inv_freq);
  index_vec(k, "positions", positions, x.dim(0));
  const bool per_token = inv_freq.rank() == 2;
  NEED(inv_freq.rank() == 1 || (per_token && inv_freq.dim(0) == x.dim(0)),
       str("inv_freq ", inv_freq.describe(), " should be [R/2] or [", x.dim(0), ", R/2]"));
  const int64_t half = inv_freq.dim(inv_freq.rank() - 1), D = head_dim;
  NEED(half > 0 && 2 * half <= D && head_begin >= 0 && heads >= 0 && (head_begin + heads) * D <= x.dim(1),
       str("heads [", head_begin, ", ", head_begin + heads, ") of dim ", D, " (rotary ", 2 * half,
           ") do not fit x ", x.describe()));
}

void swiglu(const char* backend, const Tensor& gate_up, Tensor& out) { check_glu({backend, "swiglu"}, gate_up, out); }
void geglu(const char* backend, const Tensor& gate_up, Tensor& out) { check_glu({backend, "geglu"}, gate_up, out); }
void swiglu_clamped(const char* backend, const Tensor& gate_up, Tensor& out, float alpha, float limit) {
  const Op k{backend, "swiglu_clamped"};
  check_glu(k, gate_up, out);
  NEED(std::isfinite(alpha) && limit > 0, str("alpha ", alpha, " must be finite and limit ", limit, " positive"));
}

void pointwise(const char* backend, Tensor& x, Pointwise, float) { defined({backend, "pointwise"}, "x", x); }

void scale_by_position(const char* backend, Tensor& x, int64_t col_begin, int64_t cols, const Tensor& positions,
                       float beta, int64_t period) {
  const Op k{backend, "scale_by_position"};
  rank_is(k, "x", x, 2);
  index_vec(k, "positions", positions, x.dim(0));
  NEED(col_begin >= 0 && cols >= 0 && col_begin + cols <= x.dim(1),
       str("columns [", col_begin, ", ", col_begin + cols, ") of x ", x.describe()));
  NEED(period >= 1 && std::isfinite(beta), str("period ", period, " (≥ 1) and beta ", beta, " (finite)"));
}

void sum_squares(const char* backend, const Tensor& x, int64_t col_begin, int64_t cols, Tensor& out) {
  const Op k{backend, "sum_squares"};
  rank_is(k, "x", x, 2);
  dtype_is(k, "out", out, DType::f32);
  NEED(col_begin >= 0 && cols >= 0 && col_begin + cols <= x.dim(1) && out.numel() == x.dim(0),
       str("columns [", col_begin, ", ", col_begin + cols, ") of x ", x.describe(), " into ", out.describe()));
}

void row_amax(const char* backend, const Tensor& x, Tensor& out) {
  const Op k{backend, "row_amax"};
  rank_is(k, "x", x, 2);
  dtype_is(k, "out", out, DType::f32);
  NEED(out.numel() == x.dim(0), str("out ", out.describe(), " for the ", x.dim(0), " rows of x ", x.describe()));
}

void round_activations(const char* backend, const Tensor& x, const ActivationRounding& rounding, const Tensor* row_amax,
                       Tensor& out) {
  const Op k{backend, "round_activations"};
  rank_is(k, "x", x, 2);
  NEED(out.shape() == x.shape() && out.dtype() == x.dtype(),
       str("out ", out.describe(), " must have x's shape and dtype, ", x.describe()));
  rounding_given(k, x, rounding, row_amax);
}

void matmul_rounded(const char* backend, const Tensor& x, const ActivationRounding& rounding, const Tensor* row_amax,
                    const Tensor& w, const Tensor* bias, Tensor& out) {
  const Op k{backend, "matmul_rounded"};
  matmul_shapes(k, x, w, bias, out);
  rounding_given(k, x, rounding, row_amax);
}

void rms_norm_cols(const char* backend, Tensor& x, int64_t col_begin, int64_t groups, int64_t width,
                   const Tensor& w, float, const Tensor* sum_sq, int64_t count) {
  const Op k{backend, "rms_norm_cols"};
  rank_is(k, "x", x, 2);
  defined(k, "w", w);
  NEED(col_begin >= 0 && groups >= 0 && width > 0 && col_begin + groups * width <= x.dim(1) && w.numel() == width,
       str(groups, " groups of ", width, " columns from ", col_begin, " of x ", x.describe(), ", w ", w.describe()));
  if (sum_sq) {
    dtype_is(k, "sum_sq", *sum_sq, DType::f32);
    NEED(sum_sq->numel() == x.dim(0) * groups && count > 0,
         str("sum_sq ", sum_sq->describe(), " should hold ", x.dim(0) * groups, " entries"));
  }
}

void kv_write(const char* backend, const Tensor& qkv, const AttentionDims& dims, const Tensor& slots,
              Tensor& cache_k, Tensor& cache_v) {
  const Op k{backend, "kv_write"};
  check_dims(k, dims);
  check_qkv(k, dims, qkv);
  index_vec(k, "slots", slots, qkv.dim(0));
  check_cache(k, dims, qkv, cache_k, cache_v);
}

void attention_packed(const char* backend, const Tensor& qkv, const AttentionDims& dims, const Tensor& run_start,
                      Tensor& out) {
  const Op k{backend, "attention_packed"};
  check_dims(k, dims);
  check_qkv(k, dims, qkv);
  index_vec(k, "run_start", run_start, qkv.dim(0));
  check_attention_out(k, dims, qkv, out);
}

void attention_cache(const char* backend, const Tensor& qkv, const AttentionDims& dims, const Tensor& rows,
                     const Tensor& positions, const Tensor& table, const Tensor& cache_k, const Tensor& cache_v,
                     Tensor& out) {
  const Op k{backend, "attention_cache"};
  check_dims(k, dims);
  check_qkv(k, dims, qkv);
  index_vec(k, "rows", rows, qkv.dim(0));
  index_vec(k, "positions", positions, qkv.dim(0));
  rank_is(k, "table", table, 2);
  dtype_is(k, "table", table, DType::i32);
  check_cache(k, dims, qkv, cache_k, cache_v);
  check_attention_out(k, dims, qkv, out);
}

void gather_rows(const char* backend, const Tensor& src, const Tensor& index, Tensor& out) {
  const Op k{backend, "gather_rows"};
  defined(k, "src", src);
  defined(k, "out", out);
  NEED(src.rank() >= 1 && out.rank() == src.rank() && out.dtype() == src.dtype(),
       str("out ", out.describe(), " and src ", src.describe(), " disagree"));
  for (size_t i = 1; i < src.rank(); ++i)
    NEED(out.dim(i) == src.dim(i), str("out ", out.describe(), " and src ", src.describe(), " differ in row shape"));
  index_vec(k, "index", index, out.dim(0));
}

void copy_columns(const char* backend, const Tensor& src, Tensor& dst, int64_t col_begin, int64_t cols) {
  const Op k{backend, "copy_columns"};
  rank_is(k, "src", src, 2);
  rank_is(k, "dst", dst, 2);
  NEED(src.dim(0) == dst.dim(0), str("src ", src.describe(), " and dst ", dst.describe(), " differ in rows"));
  NEED(cols >= 0 && cols <= src.dim(1) && col_begin >= 0 && col_begin + cols <= dst.dim(1),
       str("columns [", col_begin, ", ", col_begin + cols, ") from ", src.describe(), " into ", dst.describe()));
}

void copy_heads(const char* backend, const Tensor& src, Tensor& dst, const HeadCopy& c) {
  const Op k{backend, "copy_heads"};
  rank_is(k, "src", src, 2);
  rank_is(k, "dst", dst, 2);
  NEED(src.dtype() == dst.dtype(), str("src ", src.describe(), " and dst ", dst.describe(), " differ in dtype"));
  NEED(c.heads >= 0 && c.width >= 0 && c.step >= 1 && c.src_begin >= 0 && c.dst_begin >= 0 && c.src_stride >= 0 &&
           c.dst_stride >= 0,
       str("heads ", c.heads, ", width ", c.width, ", step ", c.step, ", begins ", c.src_begin, "/", c.dst_begin,
           ", strides ", c.src_stride, "/", c.dst_stride, ": none may be negative (step ≥ 1)"));
  const int64_t r = c.tokens(src.dim(0));
  NEED(!c.src_blocks || r * c.heads == src.dim(0),
       str("src ", src.describe(), " is not ", c.heads, " head blocks of equal rows"));
  NEED(dst.dim(0) == (c.dst_blocks ? r * c.heads : r),
       str("dst ", dst.describe(), " has not the rows of ", r, " tokens", c.dst_blocks ? str(" × ", c.heads, " heads") : "",
           " (src ", src.describe(), ")"));
  if (c.heads == 0 || c.width == 0) return;
  const int64_t last_src = c.src_begin + (c.heads - 1) * c.src_stride + (c.width - 1) * c.step;
  const int64_t last_dst = c.dst_begin + (c.heads - 1) * c.dst_stride + c.width - 1;
  NEED(last_src < src.dim(1), str("column ", last_src, " of src ", src.describe(), " is read"));
  NEED(last_dst < dst.dim(1), str("column ", last_dst, " of dst ", dst.describe(), " is written"));
}

void router_softmax(const char* backend, const Tensor& logits, Tensor& probs) {
  const Op k{backend, "router_softmax"};
  rank_is(k, "logits", logits, 2);
  rank_is(k, "probs", probs, 2);
  dtype_is(k, "probs", probs, DType::f32);
  NEED(probs.dim(0) == logits.dim(0) && probs.dim(1) == logits.dim(1),
       str("logits ", logits.describe(), " and probs ", probs.describe(), " disagree"));
}

void top_k(const char* backend, const Tensor& probs, int64_t kk, bool, Tensor& weights, Tensor& experts) {
  const Op k{backend, "top_k"};
  rank_is(k, "probs", probs, 2);
  dtype_is(k, "probs", probs, DType::f32);
  const int64_t n = probs.dim(0), e = probs.dim(1);
  NEED(kk >= 1 && kk <= e, str("k ", kk, " of ", e, " columns"));
  f32_vec(k, "weights", weights, n * kk);
  index_vec(k, "experts", experts, n * kk);
}

void choose_experts(const char* backend, const Tensor& logits, const Tensor* bias, const ExpertChoice& r, int64_t kk,
                    Tensor& weights, Tensor& experts) {
  const Op k{backend, "choose_experts"};
  rank_is(k, "logits", logits, 2);
  dtype_is(k, "logits", logits, DType::f32);
  const int64_t n = logits.dim(0), e = logits.dim(1);
  if (bias) f32_vec(k, "bias", *bias, e);
  NEED(e <= 1024, str(e, " experts (at most 1024)"));
  NEED(r.groups >= 1 && r.groups <= topk::kMaxExpertGroups && e % r.groups == 0,
       str("n_group ", r.groups, " does not divide ", e, " experts"));
  NEED(r.keep_groups >= 1 && r.keep_groups <= r.groups, str("topk_group ", r.keep_groups, " of ", r.groups, " groups"));
  NEED(!(r.groups > 1 && r.group_top2) || e / r.groups >= 2,
       str("a group's score sums its 2 best experts: groups of ", e / r.groups));
  NEED(kk >= 1 && kk <= r.keep_groups * (e / r.groups),
       str("k ", kk, " of the ", r.keep_groups * (e / r.groups), " experts in ", r.keep_groups, " of ", r.groups, " groups"));
  f32_vec(k, "weights", weights, n * kk);
  index_vec(k, "experts", experts, n * kk);
}

void grouped_matmul(const char* backend, const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets,
                    Tensor& out) {
  const Op k{backend, "grouped_matmul"};
  rank_is(k, "x", x, 2);
  rank_is(k, "w", w, 2);
  rank_is(k, "out", out, 2);
  const int64_t groups = static_cast<int64_t>(offsets.size()) - 1, M = x.dim(0), K = x.dim(1), O = out.dim(1);
  NEED(groups >= 1 && w.dim(1) == K && w.dim(0) == groups * O && out.dim(0) == M && offsets.front() == 0 &&
           offsets.back() == M,
       str(groups, " groups: ", x.describe(), " · ", w.describe(), "ᵀ → ", out.describe()));
  for (int64_t g = 0; g < groups; ++g)
    NEED(offsets[static_cast<size_t>(g)] <= offsets[static_cast<size_t>(g) + 1], str("offsets decrease at group ", g));
}

void moe_combine(const char* backend, const Tensor& y, const Tensor& rows, const Tensor& experts, const Tensor& weights,
                 Tensor& out) {
  const Op k{backend, "moe_combine"};
  rank_is(k, "y", y, 2);
  rank_is(k, "out", out, 2);
  defined(k, "rows", rows);
  const int64_t n = out.dim(0), h = out.dim(1), kk = n > 0 ? rows.numel() / n : 0;
  NEED(y.dim(1) == h, str("y ", y.describe(), " and out ", out.describe(), " differ in width"));
  index_vec(k, "rows", rows, n * kk);
  index_vec(k, "experts", experts, n * kk);
  f32_vec(k, "weights", weights, n * kk);
}

void logit_stats(const char* backend, const Tensor& logits, int64_t valid, int64_t vocab_offset, const Tensor& targets,
                 Tensor& max, Tensor& sumexp, Tensor& target_logit) {
  const Op k{backend, "logit_stats"};
  check_logits(k, logits, valid, vocab_offset);
  const int64_t N = logits.dim(0);
  index_vec(k, "targets", targets, N);
  f32_vec(k, "max", max, N);
  f32_vec(k, "sumexp", sumexp, N);
  f32_vec(k, "target_logit", target_logit, N);
}

void argmax(const char* backend, const Tensor& logits, int64_t valid, int64_t vocab_offset, Tensor& value,
            Tensor& index) {
  const Op k{backend, "argmax"};
  check_logits(k, logits, valid, vocab_offset);
  f32_vec(k, "value", value, logits.dim(0));
  index_vec(k, "index", index, logits.dim(0));
}

void gumbel_max(const char* backend, const Tensor& logits, int64_t valid, int64_t vocab_offset, uint64_t, uint64_t,
                int32_t, float temperature, Tensor& value, Tensor& index) {
  const Op k{backend, "gumbel_max"};
  check_logits(k, logits, valid, vocab_offset);
  NEED(temperature > 0.f, str("temperature ", temperature, " should be > 0"));
  f32_vec(k, "value", value, logits.dim(0));
  index_vec(k, "index", index, logits.dim(0));
}

void sigmoid_mul(const char* backend, Tensor& x, const Tensor& gate) {
  const Op k{backend, "sigmoid_mul"};
  rank_is(k, "x", x, 2);
  rank_is(k, "gate", gate, 2);
  NEED(gate.dim(0) == x.dim(0) && gate.dim(1) > 0 && x.dim(1) % gate.dim(1) == 0 && gate.dtype() == x.dtype(),
       str("gate ", gate.describe(), " should be [", x.dim(0), ", G] ", dtype_name(x.dtype()), " with G dividing x ",
           x.describe(), "'s columns"));
}

void causal_conv1d(const char* backend, const Tensor& x, const Tensor& weight, const Tensor& rows, const Tensor& keep,
                   Tensor& state, Tensor& out) {
  const Op k{backend, "causal_conv1d"};
  rank_is(k, "x", x, 2);
  rank_is(k, "weight", weight, 2);
  rank_is(k, "state", state, 3);
  dtype_is(k, "state", state, DType::f32);
  index_vec(k, "rows", rows, x.dim(0));
  if (keep.defined()) index_vec(k, "keep", keep, x.dim(0));
  NEED(weight.dim(0) == x.dim(1) && weight.dim(1) >= 1,
       str("weight ", weight.describe(), " should be [", x.dim(1), ", K ≥ 1] for x ", x.describe()));
  NEED(state.dim(1) == x.dim(1) && state.dim(2) == weight.dim(1) - 1,
       str("state ", state.describe(), " should be [rows, ", x.dim(1), ", ", weight.dim(1) - 1, "]"));
  NEED(out.shape() == x.shape() && out.dtype() == x.dtype() && out.data() != x.data(),
       str("out ", out.describe(), " should match x ", x.describe(), " and not alias it"));
}

void gated_delta_rule(const char* backend, const Tensor& qkv, const Tensor& ab, const Tensor& a_log,
                      const Tensor& dt_bias, const Tensor& rows, const Tensor& positions, const Tensor& keep,
                      const DeltaNetDims& d, Tensor& state, Tensor& out) {
  const Op k{backend, "gated_delta_rule"};
  NEED(d.key_heads > 0 && d.key_dim > 0 && d.value_heads > 0 && d.value_dim > 0 && d.value_heads % d.key_heads == 0,
       str("heads ", d.key_heads, " × ", d.key_dim, " (keys) and ", d.value_heads, " × ", d.value_dim,
           " (values): positive, value heads a multiple of key heads"));
  rank_is(k, "qkv", qkv, 2);
  const int64_t n = qkv.dim(0);
  NEED(qkv.dim(1) == d.qkv_width(), str("qkv ", qkv.describe(), " should have ", d.qkv_width(), " columns"));
  rank_is(k, "ab", ab, 2);
  NEED(ab.dim(0) == n && ab.dim(1) == 2 * d.value_heads && ab.dtype() == qkv.dtype(),
       str("ab ", ab.describe(), " should be [", n, ", ", 2 * d.value_heads, "] ", dtype_name(qkv.dtype())));
  defined(k, "a_log", a_log);
  defined(k, "dt_bias", dt_bias);
  NEED(a_log.numel() == d.value_heads && dt_bias.numel() == d.value_heads,
       str("a_log ", a_log.describe(), " and dt_bias ", dt_bias.describe(), " should hold ", d.value_heads, " entries"));
  index_vec(k, "rows", rows, n);
  if (positions.defined()) index_vec(k, "positions", positions, n);
  if (keep.defined()) index_vec(k, "keep", keep, n);
  rank_is(k, "state", state, 4);
  dtype_is(k, "state", state, DType::f32);
  NEED(state.dim(1) == d.value_heads && state.dim(2) == d.key_dim && state.dim(3) == d.value_dim,
       str("state ", state.describe(), " should be [rows, ", d.value_heads, ", ", d.key_dim, ", ", d.value_dim, "]"));
  rank_is(k, "out", out, 2);
  NEED(out.dim(0) == n && out.dim(1) == d.value_heads * d.value_dim && out.dtype() == qkv.dtype(),
       str("out ", out.describe(), " should be [", n, ", ", d.value_heads * d.value_dim, "] ", dtype_name(qkv.dtype())));
}

void rms_norm_gated(const char* backend, const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& out) {
  const Op k{backend, "rms_norm_gated"};
  rank_is(k, "x", x, 2);
  defined(k, "w", w);
  NEED(w.numel() > 0 && x.dim(1) % w.numel() == 0,
       str("w ", w.describe(), ": x ", x.describe(), "'s columns should be whole groups of its ", w.numel()));
  NEED(z.shape() == x.shape() && z.dtype() == x.dtype(), str("z ", z.describe(), " should match x ", x.describe()));
  NEED(out.shape() == x.shape() && out.dtype() == x.dtype(), str("out ", out.describe(), " should match x ", x.describe()));
  NEED(eps >= 0 && std::isfinite(eps), str("eps ", eps, " should be finite and ≥ 0"));
}

#undef NEED

}  // namespace linnet::op_checks
