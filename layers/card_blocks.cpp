#include "layers/card_blocks.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <sstream>

#include "core/error.h"
#include "layers/card_args.h"
#include "layers/rope.h"

namespace linnet::card {

namespace {

bool gelu_tanh(const ModelConfig& c) { return c.activation == ModelConfig::Activation::gelu_tanh; }

// What the three family blocks share: the options and what the config decides.
struct Family {
  const ModelConfig& c;
  const FamilyOptions& o;
  bool own_d;   // D a generic of its own (the seed writes H / Heads)
  bool window;  // sliding layers with a window
  std::string norm() const { return c.norm_plus_one ? "RmsNorm1p" : "RmsNorm"; }
  std::string mlp() const { return gelu_tanh(c) ? "GeGlu" : "SwiGlu"; }
  // The generics DecoderLayer, GroupedQueryAttention and Model add to the seed's: declared
  // (", D: Dim, Window: Dim") or passed on (", D, Window").
  std::string d_generics(bool declared) const {
    if (!own_d) return "";
    const std::string dim = declared ? ": Dim" : "";
    return ", D" + dim + (window ? ", Window" + dim : "");
  }
  std::string expert_generics(bool declared) const {
    if (!c.moe()) return "";
    const std::string dim = declared ? ": Dim" : "";
    return ", Experts" + dim + ", TopK" + dim + ", ExpertInner" + dim + (shared() ? ", SharedInner" + dim : "");
  }
  bool shared() const { return c.shared_expert_inner > 0; }
  // SparseMoe as a layer names it.
  std::string moe() const {
    return std::string("SparseMoe<H, Experts, TopK, ExpertInner, ") + (shared() ? "SharedInner, " : "") + "T, Shards>";
  }
};

std::string num(double v) {
  std::ostringstream o;
  o << std::setprecision(9) << v;
  return o.str();
}

std::string describe_rope(const ModelConfig& c, const Rope& r) {
  const RopeScaling& s = r.scaling;
  std::string out = "RoPE θ=" + num(r.theta);
  switch (s.type) {
    case RopeScaling::Type::none: break;
    case RopeScaling::Type::linear: out += ", linear ×" + num(s.factor); break;
    case RopeScaling::Type::llama3:
      out += ", llama3 ×" + num(s.factor) + " (original " + std::to_string(s.original_max_position) + ")";
      break;
    case RopeScaling::Type::dynamic:
      out += ", dynamic NTK ×" + num(s.factor) + " (past max_position_embeddings " + std::to_string(c.max_position) + ")";
      break;
    case RopeScaling::Type::yarn: out += ", yarn ×" + num(s.factor) + " (original " + std::to_string(s.original_max_position) + ")"; break;
    case RopeScaling::Type::longrope:
      out += ", longrope (short/long factors, long past " + std::to_string(s.original_max_position) + ")";
      break;
  }
  if (c.partial_rotary_factor != 1.0)
    out += ", rotating " + std::to_string(c.rotary_dim()) + " of D dims (partial_rotary_factor " + num(c.partial_rotary_factor) + ")";
  return out;
}

// "0, 2, 4" for the layers whose kind matches.
std::string layer_list(const ModelConfig& c, const std::function<bool(const LayerKind&)>& pick) {
  std::string out;
  for (int64_t i = 0; i < c.layers; ++i)
    if (pick(c.layer_kind(i))) out += (out.empty() ? "" : ", ") + std::to_string(i);
  return out;
}

// The functions GroupedQueryAttention and DecoderLayer share: x is the hidden state.
std::vector<Function> layer_functions() {
  auto h = [](std::vector<std::string> dims) { dims.push_back("H"); return result(std::move(dims), "T"); };
  // x: Tensor[dims…, H; T], and the same shape as a result.
  auto xd = [](std::vector<std::string> dims) { dims.push_back("H"); return tensor("x", std::move(dims), "T"); };
  const Arg pos = scalar("pos", "i32");
  const Arg positions_p = tensor("positions", {"P"}, "i32"), segments_p = tensor("segments", {"P"}, "i32");
  const Arg rows_p = tensor("rows", {"P"}, "i32"), slots_p = tensor("slots", {"P"}, "i32");
  const Arg table = tensor("table", {"Rows", "Pages"}, "i32");
  return {
      fn("pub fn", "forward", "B: Dim, S: Dim", {xd({"B", "S"})}, h({"B", "S"})),
      fn("pub fn", "decode", "", {xd({"Batch", "1"}), pos}, h({"Batch", "1"})),
      fn("pub fn", "prefill", "S: Dim", {xd({"Batch", "S"}), pos}, h({"Batch", "S"})),
      fn("pub fn", "decode_rows", "", {xd({"Batch", "1"}), tensor("positions", {"Batch"}, "i32")}, h({"Batch", "1"})),
      fn("pub fn", "prefill_slots", "M: Dim, S: Dim", {xd({"M", "S"}), tensor("slots", {"M"}, "i32")}, h({"M", "S"})),
      fn("pub fn", "prefill_packed", "P: Dim", {xd({"1", "P"}), rows_p, positions_p, segments_p}, h({"1", "P"})),
      fn("pub fn", "packed", "P: Dim", {xd({"1", "P"}), positions_p, segments_p}, h({"1", "P"})),
      fn("pub fn", "step_packed", "P: Dim",
         {xd({"1", "Batch + P"}), rows_p, positions_p, segments_p, tensor("step_positions", {"Batch"}, "i32")},
         h({"1", "Batch + P"})),
      fn("pub fn", "decode_paged", "Rows: Dim, Pages: Dim",
         {xd({"Rows", "1"}), tensor("positions", {"Rows"}, "i32"), table}, h({"Rows", "1"})),
      fn("pub fn", "prefill_paged", "P: Dim, Rows: Dim, Pages: Dim", {xd({"1", "P"}), positions_p, rows_p, slots_p, table},
         h({"1", "P"})),
      fn("pub fn", "step_paged", "P: Dim, Rows: Dim, Pages: Dim",
         {xd({"1", "P + Rows"}), positions_p, rows_p, slots_p, tensor("step_positions", {"Rows"}, "i32"), table},
         h({"1", "P + Rows"})),
  };
}

// A block with one generic-shaped forward: forward<*S: Shape>(name: Tensor[*S(, In); dtype]) -> ...
Function shaped_forward(std::string arg, std::string in_dim, std::string in_type, std::string out_dim) {
  std::vector<std::string> in = {"*S"};
  if (!in_dim.empty()) in.push_back(in_dim);
  return fn("pub fn", "forward", "*S: Shape", {tensor(std::move(arg), in, std::move(in_type))},
            result({"*S", std::move(out_dim)}, "T"));
}

const char* kLayerGenerics =
    "H: Dim, Heads: Dim, KvHeads: Dim, Inner: Dim, Batch: Dim, MaxSeq: Dim, T: Float, Shards: Dim = 1, PageSize: Dim = 64";
const char* kLayerArgs = "H, Heads, KvHeads, Inner, Batch, MaxSeq, T, Shards, PageSize";

Block decoder_layer(const Family& f) {
  const ModelConfig& c = f.c;
  const std::string n = f.norm() + "<H, T>";
  const std::string dense = f.mlp() + "<H, Inner / Shards, T>";
  std::vector<std::string> m;
  if (f.c.pre_norms) m.push_back("sub attention_norm: " + n);
  if (c.linear_attention)  // a hybrid: the layers layer_types names linear_attention
    m.push_back("sub linear_attention: GatedDeltaNet<H, LinearKeyHeads, LinearValueHeads, Batch, T, Shards>  (layers " +
                layer_list(c, [](const LayerKind& k) { return k.linear; }) + "; the others attention)");
  if (c.mla)
    m.push_back("sub attention: LatentAttention<H, Heads, Batch, MaxSeq, T, Shards, PageSize>");
  else
    m.push_back("sub attention: GroupedQueryAttention<H, Heads, KvHeads, Batch, MaxSeq, T, Shards, PageSize" +
                f.d_generics(false) + ">");
  if (f.c.post_norms) m.push_back("sub post_attention_norm: " + n);
  if (f.c.pre_norms) m.push_back("sub mlp_norm: " + n);
  const std::string moe = f.moe();
  if (!c.moe())
    m.push_back("sub mlp: " + dense);
  else if (!c.any_dense_mlp())
    m.push_back("sub mlp: " + moe);
  else
    m.push_back("sub mlp: " + moe + "  (sparse_layers; the others " + dense + ")");
  if (f.c.post_norms) m.push_back("sub post_mlp_norm: " + n);
  if (c.residual_multiplier != 1.0) m.push_back("const residual_multiplier: f32 = " + num(c.residual_multiplier));
  return {"DecoderLayer",
          f.o.ns + "::DecoderLayer<" + kLayerGenerics + f.d_generics(true) + f.expert_generics(true) + ">", m,
          layer_functions()};
}

Block attention(const Family& f) {
  const ModelConfig& c = f.c;
  const std::string d = f.own_d ? "D" : "H / Heads", pd = f.own_d ? "D" : "(H / Heads)";
  std::vector<std::string> m = {"sub q_proj: Linear<H, (Heads / Shards) * " + pd + (c.attention_output_gate ? " * 2" : "") +
                                    ", T>" + (c.attention_output_gate ? "  (per head [q | gate])" : ""),
                                "sub k_proj: Linear<H, (KvHeads / Shards) * " + pd + ", T>",
                                "sub v_proj: Linear<H, (KvHeads / Shards) * " + pd + ", T>",
                                "sub o_proj: Linear<(Heads / Shards) * " + pd + ", H, T>",
                                "state cache_k: Tensor[Batch, KvHeads / Shards, MaxSeq, " + d + "; T]",
                                "state cache_v: Tensor[Batch, KvHeads / Shards, MaxSeq, " + d + "; T]"};
  const std::string norm = f.norm();
  if (f.c.qk_norm == QkNorm::per_head) {
    m.push_back("sub q_norm: " + norm + "<D, T>  (each head)");
    m.push_back("sub k_norm: " + norm + "<D, T>  (each head)");
  } else if (f.c.qk_norm == QkNorm::whole) {
    m.push_back("sub q_norm: " + norm + "<(Heads / Shards) * D, T>  (over Heads * D: sum of squares all-reduced)");
    m.push_back("sub k_norm: " + norm + "<(KvHeads / Shards) * D, T>  (over KvHeads * D: sum of squares all-reduced)");
  }
  if (f.own_d) {  // the seed's scale and RoPE go without saying
    const double scale = c.attention_scale.value_or(1.0 / std::sqrt(static_cast<double>(c.head_dim())));
    m.push_back("const scale: f32 = " + num(static_cast<float>(scale)) + (c.attention_scale ? "" : "  (1 / sqrt(D))"));
    if (c.attn_softcap > 0) m.push_back("const softcap: f32 = " + num(c.attn_softcap) + "  (scores: softcap * tanh(s / softcap))");
    if (f.window) m.push_back("const window: Window  (sliding layers: the last Window positions)");
    if (c.attention_sinks)
      m.push_back("param sinks: Tensor[Heads / Shards; f32]  (a logit per head in each softmax's denominator: "
                  "softmax over [scores | sink], the sink's share dropped)");
    m.push_back("const rope: " + describe_rope(c, layer_rope(c, 0)));
  }
  if (f.o.fused_qkv)
    m.push_back("checkpoint: q_proj, k_proj, v_proj are row ranges of one qkv_proj tensor (each rank reads its rows)");
  if (c.attention_output_gate)
    m.push_back("fn output_gate: attention(q, k, v) * sigmoid(gate), then o_proj (gate: each head's second half of q_proj)");
  return {"GroupedQueryAttention",
          f.o.ns + ".attention::GroupedQueryAttention<H: Dim, Heads: Dim, KvHeads: Dim, Batch: Dim, MaxSeq: Dim, T: Float, "
                   "Shards: Dim = 1, PageSize: Dim = 64" + f.d_generics(true) + ">",
          m, layer_functions()};
}

// Multi-head latent attention (ModelConfig::mla), its sizes as constants of the block.
Block latent_attention(const Family& f) {
  const ModelConfig& c = f.c;
  const LatentAttentionConfig& l = *c.mla;
  std::vector<std::string> m = {
      str("const q_lora_rank: Dim = ", l.q_lora, ", kv_lora_rank: Dim = ", l.kv_lora, ", qk_nope_head_dim: Dim = ",
          l.nope, ", qk_rope_head_dim: Dim = ", l.rope, ", v_head_dim: Dim = ", l.v)};
  if (l.q_lora > 0) {
    m.push_back("sub q_a_proj: Linear<H, q_lora_rank, T>  (every rank whole)");
    m.push_back("sub q_a_norm: RmsNorm<q_lora_rank, T>  (eps 1e-6)");
    m.push_back("sub q_b_proj: Linear<q_lora_rank, (Heads / Shards) * (qk_nope_head_dim + qk_rope_head_dim), T>");
  } else {
    m.push_back("sub q_proj: Linear<H, (Heads / Shards) * (qk_nope_head_dim + qk_rope_head_dim), T>  (q_lora_rank null)");
  }
  m.push_back("sub kv_a_proj: Linear<H, kv_lora_rank + qk_rope_head_dim, T>  (kv_a_proj_with_mqa: [c_kv | k_pe]; every "
              "rank whole)");
  m.push_back("sub kv_a_norm: RmsNorm<kv_lora_rank, T>  (on c_kv; eps 1e-6)");
  m.push_back("sub kv_b_proj: Linear<kv_lora_rank, (Heads / Shards) * (qk_nope_head_dim + v_head_dim), T>  (held absorbed: "
              "each head's key rows transposed, q_lat = W_UK^T q_nope, and its value rows, out = W_UV (p * c_kv))");
  m.push_back("sub o_proj: Linear<(Heads / Shards) * v_head_dim, H, T>");
  m.push_back("state cache_latent: Tensor[Batch, MaxSeq, qk_rope_head_dim + kv_lora_rank; T]  ([k_pe | c_kv], every rank "
              "whole; the keys and the values of one KV head)");
  m.push_back("fn score = [q_pe | q_lat] * [k_pe | c_kv] * scale  (= q_nope * k_nope + q_pe * k_pe)");
  m.push_back("const scale: f32 = " + num(static_cast<float>(*c.attention_scale)) +
              "  (qk_head_dim^-0.5, times yarn's mscale(mscale_all_dim)^2 where set)");
  m.push_back("const rope: " + describe_rope(c, layer_rope(c, 0)) + " on qk_rope_head_dim" +
              (l.interleaved ? " (rope_interleave: pairs (0, 1), (2, 3), ...)" : ""));
  return {"LatentAttention",
          f.o.ns + ".attention::LatentAttention<H: Dim, Heads: Dim, Batch: Dim, MaxSeq: Dim, T: Float, Shards: Dim = 1, "
                   "PageSize: Dim = 64>",
          m, layer_functions()};
}

Block model(const Family& f) {
  const ModelConfig& c = f.c;
  std::vector<Function> fns;
  for (const auto& e : entries()) {
    fns.push_back(e);
    if (e.name == "hidden_packed") fns.push_back(fn("fn", "packed_states", "P: Dim", packed_args(), result({"P", "H"}, "T")));
  }
  fns.push_back(fn("fn", "step", "", {tensor("token", {"Batch", "1"}, "i32"), scalar("pos", "i32")},
                   result({"Batch", "Vocab"}, "T")));
  fns.push_back(fn("fn", "logits", "R: Dim", {tensor("x", {"R", "H"}, "T")}, result({"R", "Vocab"}, "T")));
  fns.push_back(fn("fn", "hidden", "B: Dim, S: Dim", {tensor("tokens", {"B", "S"}, "i32")}, result({"B", "S", "H"}, "T")));
  fns.push_back(fn("fn", "hidden_states", "B: Dim, S: Dim", {tensor("tokens", {"B", "S"}, "i32")},
                   result({"B", "S", "H"}, "T")));

  std::vector<std::string> m = {"sub embedding: Embedding<Vocab, H, T>"};
  if (c.embedding_scale != 1.0) m.push_back("const embedding_scale: f32 = " + num(static_cast<float>(c.embedding_scale)));
  m.push_back(std::string("sub layers: [DecoderLayer<") + kLayerArgs + f.d_generics(false) + f.expert_generics(false) +
              ">; Layers]");
  if (c.moe() && c.any_dense_mlp())
    m.push_back("const sparse_layers: [" + layer_list(c, [](const LayerKind& k) { return k.sparse; }) +
                "]  (a SparseMoe for the MLP; the others a dense " + f.mlp() + ")");
  if (f.window)
    m.push_back("const sliding_layers: [" + layer_list(c, [](const LayerKind& k) { return k.sliding; }) +
                "]  (attend within Window; the others every position)");
  if (c.local_rope)
    m.push_back("const local_rope: " + describe_rope(c, *c.local_rope) + "  (layers [" +
                layer_list(c, [](const LayerKind& k) { return k.rope == 1; }) + "])");
  const std::string nope = layer_list(c, [](const LayerKind& k) { return k.rope < 0; });
  if (!nope.empty()) m.push_back("const no_rope_layers: [" + nope + "]  (no RoPE)");
  m.push_back("sub norm: " + f.norm() + "<H, T>");
  m.push_back("sub lm_head: Linear<H, Vocab / Shards, T>");
  if (c.logits_scaling != 1.0)
    m.push_back("const logits_scaling: f32 = " + num(static_cast<float>(c.logits_scaling)) + "  (logits / logits_scaling)");
  if (c.final_softcap > 0)
    m.push_back("const final_softcap: f32 = " + num(c.final_softcap) + "  (logits: softcap * tanh(l / softcap))");
  return {"Model",
          f.o.ns + "::Model<Vocab: Dim, H: Dim, Heads: Dim, KvHeads: Dim, Inner: Dim, Layers: Dim, Batch: Dim, MaxSeq: Dim, "
                   "T: Float = bf16, Shards: Dim = 1, PageSize: Dim = 64" + f.d_generics(true) + f.expert_generics(true) + ">",
          m, fns};
}

Block embedding() {
  return {"Embedding",
          "std.nn.embedding::Embedding<Vocab: Dim, H: Dim, T: Float = bf16>",
          {"param weight: Tensor[Vocab, H; T]"},
          {fn("pub fn", "forward", "*S: Shape", {tensor("ids", {"*S"}, "i32")}, result({"*S", "H"}, "T"))}};
}

Block linear() {
  return {"Linear",
          "std.nn.linear::Linear<In: Dim, Out: Dim, T: Float = bf16>",
          {"param weight: Tensor[Out, In; T]", "param bias: Tensor[Out; T]?"},
          {shaped_forward("x", "In", "T", "Out")}};
}

Block rms_norm() {
  return {"RmsNorm", "std.nn.norm::RmsNorm<H: Dim, T: Float = bf16>", {"param weight: Tensor[H; T]"},
          {shaped_forward("x", "H", "T", "H")}};
}

Block rms_norm_1p() {
  return {"RmsNorm1p", "gemma.norm::RmsNorm1p<H: Dim, T: Float = bf16>",
          {"param weight: Tensor[H; T]  (x / sqrt(mean(x²) + eps) * (1 + weight), in f32)"},
          {shaped_forward("x", "H", "T", "H")}};
}

// SwiGlu, or GeGlu (the tanh GELU for silu).
Block gated_mlp(bool gelu_tanh, bool fused_gate_up) {
  const std::string name = gelu_tanh ? "GeGlu" : "SwiGlu";
  Block b{name,
          "std.nn.mlp::" + name + "<H: Dim, Inner: Dim, T: Float = bf16>",
          {"sub gate: Linear<H, Inner, T>", "sub up: Linear<H, Inner, T>", "sub down: Linear<Inner, H, T>"},
          {shaped_forward("x", "H", "T", "H")}};
  if (gelu_tanh) b.members.push_back("fn act = gelu_tanh  (down(gelu_tanh(gate(x)) * up(x)))");
  if (fused_gate_up)
    b.members.push_back("checkpoint: gate, up are row ranges of one gate_up_proj tensor (each rank reads its rows)");
  return b;
}

// Gated DeltaNet (ModelConfig::linear_attention): its sizes as constants of the block, its
// state a fixed size a row.
Block gated_delta_net(const Family& f) {
  const ModelConfig& c = f.c;
  const LinearAttentionConfig& l = *c.linear_attention;
  const std::string kv = "(LinearKeyHeads / Shards) * Dk", vv = "(LinearValueHeads / Shards) * Dv";
  std::vector<std::string> m = {
      str("const LinearKeyHeads: Dim = ", l.key_heads, ", LinearValueHeads: Dim = ", l.value_heads, ", Dk: Dim = ",
          l.key_dim, ", Dv: Dim = ", l.value_dim, ", K: Dim = ", l.conv_kernel),
      "sub qkv_proj: Linear<H, 2 * " + kv + " + " + vv + ", T>  (q | k | v: value head h reads key head h / " +
          "(LinearValueHeads / LinearKeyHeads))",
      "sub z_proj: Linear<H, " + vv + ", T>",
      "sub ba_proj: Linear<H, 2 * (LinearValueHeads / Shards), T>  (b | a)",
      "param conv: Tensor[2 * " + kv + " + " + vv + ", K; T]  (causal depthwise convolution of q | k | v, then silu)",
      "param A_log: Tensor[LinearValueHeads / Shards; T]",
      "param dt_bias: Tensor[LinearValueHeads / Shards; T]",
      "sub norm: RmsNormGated<Dv, T>  (each value head: norm(o) * silu(z), a plain weight)",
      "sub out_proj: Linear<" + vv + ", H, T>  (its partial sums all-reduced)",
      "state conv_state: Tensor[Batch, 2 * " + kv + " + " + vv + ", K - 1; f32]  (a row's last K - 1 inputs)",
      "state delta_state: Tensor[Batch, LinearValueHeads / Shards, Dk, Dv; f32]",
      "fn delta_rule: q, k l2-normed (q / sqrt(Dk)), beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias); "
      "S = S * exp(g); S = S + k (x) beta * (v - S^T k); o = S^T q — token by token on its row's state"};
  if (l.grouped_projections)
    m.push_back("checkpoint: q | k | v | z from in_proj_qkvz and b | a from in_proj_ba, grouped per key head (each rank "
                "reads its heads' blocks)");
  return {"GatedDeltaNet",
          f.o.ns + ".linear_attention::GatedDeltaNet<H: Dim, LinearKeyHeads: Dim, LinearValueHeads: Dim, Batch: Dim, "
                   "T: Float, Shards: Dim = 1>",
          m, layer_functions()};
}

Block sparse_moe(const std::string& ns, bool shared, bool shared_gate) {
  Block b{"SparseMoe",
          ns + ".moe::SparseMoe<H: Dim, Experts: Dim, TopK: Dim, ExpertInner: Dim, " + (shared ? "SharedInner: Dim, " : "") +
              "T: Float, Shards: Dim = 1>",
          {"sub router: Router<H, Experts, TopK, T>",
           "sub experts: [Expert<H, ExpertInner, T>; Experts]  (--moe-sharding expert: Experts / Shards whole experts "
           "per rank; --moe-sharding tensor: every Expert<H, ExpertInner / Shards, T>, its down all-reduced)",
           "fn combine: the sum over a token's TopK experts, in increasing expert order, of weight * expert(x)  "
           "(each product rounded, then added)",
           "fn dispatch: expert sharding: each rank routes its ceil(rows / Shards) rows, each chosen row to its "
           "expert's rank and the output back (all_to_all of rows, each way), the rows all-gathered"},
          {shaped_forward("x", "H", "T", "H")}};
  if (shared)
    b.members.insert(b.members.begin() + 2,
                     "sub shared: SwiGlu<H, SharedInner / Shards, T>  (n_shared_experts; sliced as the MLP in either "
                     "sharding, its down all-reduced; added to the combined sum: combine(x) + shared(x), each in T)");
  if (shared_gate)
    b.members.insert(b.members.begin() + 3,
                     "sub shared_gate: Linear<H, 1, T>  (every rank whole: the shared expert's output * sigmoid(shared_gate(x)))");
  return b;
}

// DeepSeek's router (core/expert_choice.h), as the config sets it.
Block deepseek_router(const ExpertChoice& r, bool bias) {
  Function route = fn("pub fn", "forward", "*S: Shape", {tensor("x", {"*S", "H"}, "T")}, result({"*S", "TopK"}, "f32"));
  route.results.push_back(result({"*S", "TopK"}, "i32"));
  std::vector<std::string> m = {
      "param weight: Tensor[Experts, H; f32]  (kept in f32 whatever T)",
      std::string("fn scores = ") + (r.sigmoid ? "sigmoid(f32(x) * weight^T)" : "softmax(f32(x) * weight^T)") + ", in f32"};
  if (bias)
    m.push_back("param e_score_correction_bias: Tensor[Experts; f32]  (added to the scores to choose, never to weigh)");
  if (r.groups > 1)
    m.push_back(str("const n_group: Dim = ", r.groups, ", topk_group: Dim = ", r.keep_groups,
                    "  (each group of Experts / n_group scores ", r.group_top2 ? "its two best summed" : "its best",
                    "; the experts of the other groups are not chosen)"));
  m.push_back("fn top_k = the TopK best choices as torch.topk(sorted=False) picks them: (scores at them, experts)");
  m.push_back(std::string("const normalize: bool = ") + (r.normalize ? "true" : "false") +
              "  (norm_topk_prob: the TopK weights divided by their sum + 1e-20)");
  m.push_back("const routed_scaling_factor: f32 = " + num(r.scale) + "  (the weights times it)");
  return {"Router", "std.nn.moe::Router<H: Dim, Experts: Dim, TopK: Dim, T: Float = bf16>", m, {route}};
}

Block router(bool normalize) {
  Function route = fn("pub fn", "forward", "*S: Shape", {tensor("x", {"*S", "H"}, "T")}, result({"*S", "TopK"}, "f32"));
  route.results.push_back(result({"*S", "TopK"}, "i32"));
  return {"Router",
          "std.nn.moe::Router<H: Dim, Experts: Dim, TopK: Dim, T: Float = bf16>",
          {"param weight: Tensor[Experts, H; T]", "fn probs = softmax(x * weight^T) over Experts, in f32",
           "fn top_k = the TopK largest probs as torch.topk chooses them (ties in its order): (weights, experts)",
           std::string("const normalize: bool = ") + (normalize ? "true" : "false") +
               "  (norm_topk_prob: the TopK weights divided by their sum)"},
          {route}};
}

// gpt-oss's router: its logits with a bias in T, the top-k of them, their softmax.
Block gpt_oss_router() {
  Function route = fn("pub fn", "forward", "*S: Shape", {tensor("x", {"*S", "H"}, "T")}, result({"*S", "TopK"}, "f32"));
  route.results.push_back(result({"*S", "TopK"}, "i32"));
  return {"Router",
          "std.nn.moe::Router<H: Dim, Experts: Dim, TopK: Dim, T: Float = bf16>",
          {"param weight: Tensor[Experts, H; T]", "param bias: Tensor[Experts; T]",
           "fn logits = x * weight^T + bias, rounded to T",
           "fn top_k = the TopK largest logits as torch.topk chooses them; weights = their softmax (in f32)"},
          {route}};
}

// gpt-oss's expert: gate and up interleaved in one product, both products with biases, the
// clamped SwiGLU between them.
Block gpt_oss_expert(const ClampedSwiglu& s) {
  return {"Expert",
          "std.nn.moe::Expert<H: Dim, ExpertInner: Dim, T: Float = bf16>",
          {"sub gate_up: Linear<H, 2 * ExpertInner, T>  (with bias; rows interleaved: gate 2i, up 2i + 1)",
           "sub down: Linear<ExpertInner, H, T>  (with bias; tensor sharding: added on shard 0)",
           str("const alpha: f32 = ", num(s.alpha), ", limit: f32 = ", num(s.limit)),
           "fn act = g * sigmoid(alpha * g) * (u + 1), g = min(gate, limit), u = clamp(up, -limit, limit)",
           "checkpoint: mlp.experts.gate_up_proj [Experts, H, 2 * ExpertInner] and down_proj [Experts, ExpertInner, H] "
           "(each expert's matrix transposed), gate_up_proj_bias, down_proj_bias; the router mlp.router"},
          {shaped_forward("x", "H", "T", "H")}};
}

Block expert(bool mixtral_names) {
  Block b{"Expert",
          "std.nn.moe::Expert<H: Dim, ExpertInner: Dim, T: Float = bf16>",
          {"sub gate: Linear<H, ExpertInner, T>", "sub up: Linear<H, ExpertInner, T>",
           "sub down: Linear<ExpertInner, H, T>", "fn act = silu  (down(silu(gate(x)) * up(x)))"},
          {shaped_forward("x", "H", "T", "H")}};
  if (mixtral_names)
    b.members.push_back("checkpoint: block_sparse_moe.experts.E.w1 (gate), w3 (up), w2 (down); the router block_sparse_moe.gate");
  return b;
}

}  // namespace

std::vector<Block> seed_blocks() {
  const ModelConfig seed;
  const FamilyOptions llama;
  const Family f{seed, llama, false, false};
  return {decoder_layer(f), embedding(), attention(f), linear(), model(f), rms_norm(), gated_mlp(false, false)};
}

std::vector<Block> family_blocks(const ModelConfig& c, const FamilyOptions& o) {
  if (c.llama_shaped()) return blocks();
  const Family f{c, o, true, c.sliding_window && c.any_sliding()};
  std::vector<Block> out = {decoder_layer(f), embedding(), c.mla ? latent_attention(f) : attention(f), linear(),
                            model(f), c.norm_plus_one ? rms_norm_1p() : rms_norm()};
  if (c.linear_attention) out.push_back(gated_delta_net(f));
  if (!c.moe() || c.any_dense_mlp()) out.push_back(gated_mlp(gelu_tanh(c), o.fused_gate_up));
  if (c.moe()) {
    out.push_back(sparse_moe(o.ns, c.shared_expert_inner > 0, c.shared_expert_gate));
    if (c.clamped_swiglu) {
      out.push_back(gpt_oss_router());
      out.push_back(gpt_oss_expert(*c.clamped_swiglu));
    } else {
      out.push_back(c.expert_choice ? deepseek_router(*c.expert_choice, c.router_bias) : router(c.norm_topk_prob));
      out.push_back(expert(c.expert_names == ModelConfig::ExpertNames::mixtral));
    }
  }
  std::sort(out.begin(), out.end(), [](const Block& a, const Block& b) { return a.name < b.name; });
  return out;
}

}  // namespace linnet::card
