#include "layers/card.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <sstream>

#include "core/error.h"
#include "layers/rope.h"

namespace linnet::card {

namespace {

Arg tensor(std::string name, std::vector<std::string> dims, std::string dtype) {
  return Arg{std::move(name), std::move(dims), std::move(dtype), true};
}
Arg scalar(std::string name, std::string dtype) { return Arg{std::move(name), {}, std::move(dtype), false}; }
Arg result(std::vector<std::string> dims, std::string dtype) { return tensor("", std::move(dims), std::move(dtype)); }

Function entry_fn(std::string name, std::string generics, std::vector<Arg> args, std::vector<Arg> results) {
  return Function{"pub entry", std::move(name), std::move(generics), std::move(args), std::move(results)};
}

// Inputs shared by the packed entries.
std::vector<Arg> packed_args() {
  return {tensor("tokens", {"P"}, "i32"), tensor("positions", {"P"}, "i32"), tensor("segments", {"P"}, "i32")};
}

std::vector<Function> make_entries() {
  const Arg token = tensor("token", {"Batch", "1"}, "i32");
  const Arg tokens_b1 = tensor("tokens", {"Batch", "1"}, "i32");
  const Arg pos = scalar("pos", "i32");
  const Arg vocab_rows = result({"Batch", "Vocab"}, "T");
  auto packed_plus = [](std::vector<Arg> more) {
    std::vector<Arg> a = packed_args();
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  // prefill_packed / step_packed take rows between tokens and positions.
  std::vector<Arg> packed_rows = {tensor("tokens", {"P"}, "i32"), tensor("rows", {"P"}, "i32"),
                                  tensor("positions", {"P"}, "i32"), tensor("segments", {"P"}, "i32"),
                                  tensor("last", {"Batch"}, "i32")};
  std::vector<Arg> step_packed = packed_rows;
  step_packed.push_back(tensor("step_tokens", {"Batch", "1"}, "i32"));
  step_packed.push_back(tensor("step_positions", {"Batch"}, "i32"));
  std::vector<Arg> paged = {tensor("tokens", {"P"}, "i32"), tensor("positions", {"P"}, "i32"),
                            tensor("rows", {"P"}, "i32"), tensor("slots", {"P"}, "i32"),
                            tensor("last", {"Rows"}, "i32")};
  std::vector<Arg> prefill_paged = paged;
  prefill_paged.push_back(tensor("table", {"Rows", "Pages"}, "i32"));
  std::vector<Arg> step_paged = paged;
  step_paged.push_back(tensor("step_tokens", {"Rows", "1"}, "i32"));
  step_paged.push_back(tensor("step_positions", {"Rows"}, "i32"));
  step_paged.push_back(tensor("table", {"Rows", "Pages"}, "i32"));

  return {
      entry_fn("forward", "B: Dim, S: Dim", {tensor("tokens", {"B", "S"}, "i32")}, {result({"B", "S", "Vocab"}, "T")}),
      entry_fn("next_token", "B: Dim, S: Dim", {tensor("tokens", {"B", "S"}, "i32")}, {result({"B", "Vocab"}, "T")}),
      entry_fn("decode", "", {token, pos}, {vocab_rows}),
      entry_fn("prefill", "S: Dim", {tensor("tokens", {"Batch", "S"}, "i32"), pos}, {vocab_rows}),
      entry_fn("decode_rows", "", {tokens_b1, tensor("positions", {"Batch"}, "i32")}, {vocab_rows}),
      entry_fn("prefill_slots", "M: Dim, S: Dim",
               {tensor("tokens", {"M", "S"}, "i32"), tensor("slots", {"M"}, "i32"), tensor("lengths", {"M"}, "i32")},
               {result({"M", "Vocab"}, "T")}),
      entry_fn("loss_packed", "P: Dim",
               packed_plus({tensor("targets", {"P"}, "i64"), tensor("weights", {"P"}, "f32")}),
               {scalar("", "f32")}),
      entry_fn("log_probs_packed", "P: Dim", packed_plus({tensor("targets", {"P"}, "i64")}),
               {result({"P"}, "f32")}),
      entry_fn("hidden_packed", "P: Dim", packed_args(), {result({"P", "H"}, "T")}),
      entry_fn("prefill_packed", "P: Dim", packed_rows, {vocab_rows}),
      entry_fn("step_packed", "P: Dim", step_packed, {result({"2 * Batch", "Vocab"}, "T")}),
      entry_fn("decode_paged", "Rows: Dim, Pages: Dim",
               {tensor("tokens", {"Rows", "1"}, "i32"), tensor("positions", {"Rows"}, "i32"),
                tensor("table", {"Rows", "Pages"}, "i32")},
               {result({"Rows", "Vocab"}, "T")}),
      entry_fn("prefill_paged", "P: Dim, Rows: Dim, Pages: Dim", prefill_paged, {result({"Rows", "Vocab"}, "T")}),
      entry_fn("step_paged", "P: Dim, Rows: Dim, Pages: Dim", step_paged, {result({"2 * Rows", "Vocab"}, "T")}),
      entry_fn("generate", "Steps: Dim", {token, pos}, {result({"Batch", "Steps"}, "i32")}),
      entry_fn("sample", "Steps: Dim",
               {token, pos, tensor("key", {"2"}, "i64"), scalar("temperature", "f32")},
               {result({"Batch", "Steps"}, "i32")}),
      entry_fn("generate_until", "MaxNew: Dim", {token, pos, scalar("eos", "i32")},
               {result({"Batch", "MaxNew"}, "i32"), scalar("", "i32")}),
  };
}

Function fn(std::string kind, std::string name, std::string generics, std::vector<Arg> args, Arg res) {
  return Function{std::move(kind), std::move(name), std::move(generics), std::move(args), {std::move(res)}};
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

std::vector<Block> make_blocks() {
  const std::string layer_generics =
      "H: Dim, Heads: Dim, KvHeads: Dim, Inner: Dim, Batch: Dim, MaxSeq: Dim, T: Float, Shards: Dim = 1, PageSize: Dim = 64";
  std::vector<Function> model_fns;
  for (const auto& e : entries()) {
    model_fns.push_back(e);
    if (e.name == "hidden_packed")
      model_fns.push_back(fn("fn", "packed_states", "P: Dim", packed_args(), result({"P", "H"}, "T")));
  }
  model_fns.push_back(fn("fn", "step", "", {tensor("token", {"Batch", "1"}, "i32"), scalar("pos", "i32")},
                         result({"Batch", "Vocab"}, "T")));
  model_fns.push_back(fn("fn", "logits", "R: Dim", {tensor("x", {"R", "H"}, "T")}, result({"R", "Vocab"}, "T")));
  model_fns.push_back(fn("fn", "hidden", "B: Dim, S: Dim", {tensor("tokens", {"B", "S"}, "i32")}, result({"B", "S", "H"}, "T")));
  model_fns.push_back(fn("fn", "hidden_states", "B: Dim, S: Dim", {tensor("tokens", {"B", "S"}, "i32")},
                         result({"B", "S", "H"}, "T")));

  return {
      {"DecoderLayer",
       "llama::DecoderLayer<" + layer_generics + ">",
       {"sub attention_norm: RmsNorm<H, T>",
        "sub attention: GroupedQueryAttention<H, Heads, KvHeads, Batch, MaxSeq, T, Shards, PageSize>",
        "sub mlp_norm: RmsNorm<H, T>", "sub mlp: SwiGlu<H, Inner / Shards, T>"},
       layer_functions()},
      {"Embedding",
       "std.nn.embedding::Embedding<Vocab: Dim, H: Dim, T: Float = bf16>",
       {"param weight: Tensor[Vocab, H; T]"},
       {fn("pub fn", "forward", "*S: Shape", {tensor("ids", {"*S"}, "i32")}, result({"*S", "H"}, "T"))}},
      {"GroupedQueryAttention",
       "llama.attention::GroupedQueryAttention<H: Dim, Heads: Dim, KvHeads: Dim, Batch: Dim, MaxSeq: Dim, T: Float, "
       "Shards: Dim = 1, PageSize: Dim = 64>",
       {"sub q_proj: Linear<H, (Heads / Shards) * (H / Heads), T>",
        "sub k_proj: Linear<H, (KvHeads / Shards) * (H / Heads), T>",
        "sub v_proj: Linear<H, (KvHeads / Shards) * (H / Heads), T>",
        "sub o_proj: Linear<(Heads / Shards) * (H / Heads), H, T>",
        "state cache_k: Tensor[Batch, KvHeads / Shards, MaxSeq, H / Heads; T]",
        "state cache_v: Tensor[Batch, KvHeads / Shards, MaxSeq, H / Heads; T]"},
       layer_functions()},
      {"Linear",
       "std.nn.linear::Linear<In: Dim, Out: Dim, T: Float = bf16>",
       {"param weight: Tensor[Out, In; T]", "param bias: Tensor[Out; T]?"},
       {shaped_forward("x", "In", "T", "Out")}},
      {"Model",
       "llama::Model<Vocab: Dim, H: Dim, Heads: Dim, KvHeads: Dim, Inner: Dim, Layers: Dim, Batch: Dim, MaxSeq: Dim, "
       "T: Float = bf16, Shards: Dim = 1, PageSize: Dim = 64>",
       {"sub embedding: Embedding<Vocab, H, T>",
        "sub layers: [DecoderLayer<H, Heads, KvHeads, Inner, Batch, MaxSeq, T, Shards, PageSize>; Layers]",
        "sub norm: RmsNorm<H, T>", "sub lm_head: Linear<H, Vocab / Shards, T>"},
       model_fns},
      {"RmsNorm",
       "std.nn.norm::RmsNorm<H: Dim, T: Float = bf16>",
       {"param weight: Tensor[H; T]"},
       {shaped_forward("x", "H", "T", "H")}},
      {"SwiGlu",
       "std.nn.mlp::SwiGlu<H: Dim, Inner: Dim, T: Float = bf16>",
       {"sub gate: Linear<H, Inner, T>", "sub up: Linear<H, Inner, T>", "sub down: Linear<Inner, H, T>"},
       {shaped_forward("x", "H", "T", "H")}},
  };
}

}  // namespace

const std::vector<Function>& entries() {
  static const std::vector<Function> table = make_entries();
  return table;
}

const Function& entry(std::string_view name) {
  for (const auto& e : entries())
    if (e.name == name) return e;
  std::string all;
  for (const auto& e : entries()) all += (all.empty() ? "" : ", ") + e.name;
  throw Error(str("unknown entry '", name, "' (entries: ", all, ")"));
}

const std::vector<Block>& blocks() {
  static const std::vector<Block> table = make_blocks();
  return table;
}

namespace {

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

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> extra_generics(const ModelConfig& c) {
  std::vector<std::pair<std::string, int64_t>> out;
  if (c.llama_shaped()) return out;
  out.emplace_back("D", c.head_dim());
  if (c.sliding_window && c.any_sliding()) out.emplace_back("Window", *c.sliding_window);
  if (c.moe()) {
    out.emplace_back("Experts", c.experts);
    out.emplace_back("TopK", c.experts_per_token);
    out.emplace_back("ExpertInner", c.expert_inner);
  }
  return out;
}

std::vector<Block> blocks_for(const ModelConfig& c) {
  if (c.llama_shaped()) return blocks();
  const std::string fam = c.model_type == "gemma3_text" ? "gemma3" : c.model_type;
  const bool window = c.sliding_window && c.any_sliding();
  const std::string norm_block = c.norm_plus_one ? "RmsNorm1p" : "RmsNorm";
  const std::string mlp_block = c.activation == ModelConfig::Activation::gelu_tanh ? "GeGlu" : "SwiGlu";
  std::vector<Block> out = blocks();
  for (Block& b : out) {
    // D for H / Heads in every shape; the family's namespace and generics in the headers.
    for (auto& m : b.members) m = replace_all(m, "(H / Heads)", "D"), m = replace_all(m, "H / Heads", "D");
    b.header = replace_all(b.header, "llama::", fam + "::");
    b.header = replace_all(b.header, "llama.attention::", fam + ".attention::");
    const std::string extra = std::string(", D: Dim") + (window ? ", Window: Dim" : "");
    const std::string experts = c.moe() ? ", Experts: Dim, TopK: Dim, ExpertInner: Dim" : "";
    if (b.name == "DecoderLayer" || b.name == "GroupedQueryAttention" || b.name == "Model") {
      const size_t at = b.header.rfind('>');
      b.header.insert(at, extra + (b.name == "GroupedQueryAttention" ? "" : experts));
    }
    if (b.name == "DecoderLayer") {
      std::vector<std::string> m;
      const std::string n = norm_block + "<H, T>";
      if (c.pre_norms) m.push_back("sub attention_norm: " + n);
      m.push_back(replace_all(b.members[1], "PageSize>", std::string("PageSize, D") + (window ? ", Window>" : ">")));
      if (c.post_norms) m.push_back("sub post_attention_norm: " + n);
      if (c.pre_norms) m.push_back("sub mlp_norm: " + n);
      const std::string moe = "SparseMoe<H, Experts, TopK, ExpertInner, T, Shards>";
      if (!c.moe())
        m.push_back("sub mlp: " + mlp_block + "<H, Inner / Shards, T>");
      else if (!c.any_dense_mlp())
        m.push_back("sub mlp: " + moe);
      else
        m.push_back("sub mlp: " + moe + "  (sparse_layers; the others " + mlp_block + "<H, Inner / Shards, T>)");
      if (c.post_norms) m.push_back("sub post_mlp_norm: " + n);
      if (c.residual_multiplier != 1.0) m.push_back("const residual_multiplier: f32 = " + num(c.residual_multiplier));
      b.members = m;
    }
    if (b.name == "GroupedQueryAttention") {
      if (c.qk_norm == ModelConfig::QkNorm::per_head) {
        b.members.push_back("sub q_norm: " + norm_block + "<D, T>  (each head)");
        b.members.push_back("sub k_norm: " + norm_block + "<D, T>  (each head)");
      } else if (c.qk_norm == ModelConfig::QkNorm::whole) {
        b.members.push_back("sub q_norm: " + norm_block + "<(Heads / Shards) * D, T>  (over Heads * D: sum of squares all-reduced)");
        b.members.push_back("sub k_norm: " + norm_block + "<(KvHeads / Shards) * D, T>  (over KvHeads * D: sum of squares all-reduced)");
      }
      const double scale = c.attention_scale.value_or(1.0 / std::sqrt(static_cast<double>(c.head_dim())));
      b.members.push_back("const scale: f32 = " + num(static_cast<float>(scale)) +
                          (c.attention_scale ? "" : "  (1 / sqrt(D))"));
      if (c.attn_softcap > 0) b.members.push_back("const softcap: f32 = " + num(c.attn_softcap) + "  (scores: softcap * tanh(s / softcap))");
      if (window) b.members.push_back("const window: Window  (sliding layers: the last Window positions)");
      b.members.push_back("const rope: " + describe_rope(c, layer_rope(c, 0)));
    }
    if (b.name == "Model") {
      std::vector<std::string> m;
      m.push_back(b.members[0]);
      if (c.embedding_scale != 1.0) m.push_back("const embedding_scale: f32 = " + num(static_cast<float>(c.embedding_scale)));
      m.push_back(replace_all(b.members[1], "DecoderLayer<H, Heads, KvHeads, Inner, Batch, MaxSeq, T, Shards, PageSize>",
                              std::string("DecoderLayer<H, Heads, KvHeads, Inner, Batch, MaxSeq, T, Shards, PageSize, D") +
                                  (window ? ", Window" : "") + (c.moe() ? ", Experts, TopK, ExpertInner" : "") + ">"));
      if (c.moe() && c.any_dense_mlp())
        m.push_back("const sparse_layers: [" + layer_list(c, [](const LayerKind& k) { return k.sparse; }) +
                    "]  (a SparseMoe for the MLP; the others a dense " + mlp_block + ")");
      const std::string sliding = layer_list(c, [](const LayerKind& k) { return k.sliding; });
      if (window) m.push_back("const sliding_layers: [" + sliding + "]  (attend within Window; the others every position)");
      if (c.local_rope)
        m.push_back("const local_rope: " + describe_rope(c, *c.local_rope) + "  (layers [" +
                    layer_list(c, [](const LayerKind& k) { return k.rope == 1; }) + "])");
      const std::string nope = layer_list(c, [](const LayerKind& k) { return k.rope < 0; });
      if (!nope.empty()) m.push_back("const no_rope_layers: [" + nope + "]  (no RoPE)");
      m.push_back("sub norm: " + norm_block + "<H, T>");
      m.push_back(b.members[3]);  // lm_head
      if (c.logits_scaling != 1.0) m.push_back("const logits_scaling: f32 = " + num(static_cast<float>(c.logits_scaling)) + "  (logits / logits_scaling)");
      if (c.final_softcap > 0) m.push_back("const final_softcap: f32 = " + num(c.final_softcap) + "  (logits: softcap * tanh(l / softcap))");
      b.members = m;
    }
  }
  if (c.moe()) {
    const std::string ns = fam + ".moe::";
    const Function fwd = shaped_forward("x", "H", "T", "H");
    out.push_back(
        {"SparseMoe",
         ns + "SparseMoe<H: Dim, Experts: Dim, TopK: Dim, ExpertInner: Dim, T: Float, Shards: Dim = 1>",
         {"sub router: Router<H, Experts, TopK, T>",
          "sub experts: [Expert<H, ExpertInner, T>; Experts]  (--moe-sharding expert: Experts / Shards whole experts "
          "per rank; --moe-sharding tensor: every Expert<H, ExpertInner / Shards, T>, its down all-reduced)",
          "fn combine: the sum over a token's TopK experts, in increasing expert order, of weight * expert(x)  "
          "(each product rounded, then added)",
          "fn dispatch: expert sharding: each rank routes its ceil(rows / Shards) rows, each chosen row to its "
          "expert's rank and the output back (all_to_all of rows, each way), the rows all-gathered"},
         {fwd}});
    Function route = fn("pub fn", "forward", "*S: Shape", {tensor("x", {"*S", "H"}, "T")}, result({"*S", "TopK"}, "f32"));
    route.results.push_back(result({"*S", "TopK"}, "i32"));
    out.push_back({"Router",
                   "std.nn.moe::Router<H: Dim, Experts: Dim, TopK: Dim, T: Float = bf16>",
                   {"param weight: Tensor[Experts, H; T]",
                    "fn probs = softmax(x * weight^T) over Experts, in f32",
                    "fn top_k = the TopK largest probs as torch.topk chooses them (ties in its order): (weights, experts)",
                    std::string("const normalize: bool = ") + (c.norm_topk_prob ? "true" : "false") +
                        "  (norm_topk_prob: the TopK weights divided by their sum)"},
                   {route}});
    std::vector<std::string> expert = {"sub gate: Linear<H, ExpertInner, T>", "sub up: Linear<H, ExpertInner, T>",
                                       "sub down: Linear<ExpertInner, H, T>",
                                       "fn act = silu  (down(silu(gate(x)) * up(x)))"};
    if (c.expert_names == ModelConfig::ExpertNames::mixtral)
      expert.push_back("checkpoint: block_sparse_moe.experts.E.w1 (gate), w3 (up), w2 (down); the router block_sparse_moe.gate");
    out.push_back({"Expert", "std.nn.moe::Expert<H: Dim, ExpertInner: Dim, T: Float = bf16>", expert, {fwd}});
    if (!c.any_dense_mlp())
      out.erase(std::remove_if(out.begin(), out.end(), [](const Block& b) { return b.name == "SwiGlu"; }), out.end());
  }
  if (c.norm_plus_one)
    out.push_back({"RmsNorm1p", "gemma.norm::RmsNorm1p<H: Dim, T: Float = bf16>",
                   {"param weight: Tensor[H; T]  (x / sqrt(mean(x²) + eps) * (1 + weight), in f32)"},
                   {shaped_forward("x", "H", "T", "H")}});
  if (c.activation == ModelConfig::Activation::gelu_tanh) {
    for (const Block& b : blocks())
      if (b.name == "SwiGlu") {
        Block g = b;
        g.name = "GeGlu";
        g.header = "std.nn.mlp::GeGlu<H: Dim, Inner: Dim, T: Float = bf16>";
        g.members.push_back("fn act = gelu_tanh  (down(gelu_tanh(gate(x)) * up(x)))");
        out.push_back(g);
      }
    out.erase(std::remove_if(out.begin(), out.end(), [](const Block& b) { return b.name == "SwiGlu"; }), out.end());
  }
  if (c.norm_plus_one)
    out.erase(std::remove_if(out.begin(), out.end(), [](const Block& b) { return b.name == "RmsNorm"; }), out.end());
  if (c.fused_qkv)
    for (Block& b : out)
      if (b.name == "GroupedQueryAttention")
        b.members.push_back("checkpoint: q_proj, k_proj, v_proj are row ranges of one qkv_proj tensor (each rank reads its rows)");
  if (c.fused_gate_up)
    for (Block& b : out)
      if (b.name == "SwiGlu" || b.name == "GeGlu")
        b.members.push_back("checkpoint: gate, up are row ranges of one gate_up_proj tensor (each rank reads its rows)");
  std::sort(out.begin(), out.end(), [](const Block& a, const Block& b) { return a.name < b.name; });
  return out;
}

std::string format_type(const Arg& a) {
  if (!a.is_tensor) return a.dtype;
  std::string s = "Tensor[";
  for (size_t i = 0; i < a.dims.size(); ++i) s += (i ? ", " : "") + a.dims[i];
  return s + "; " + a.dtype + "]";
}

std::string format_signature(const Function& f) {
  std::string s = f.name;
  if (!f.generics.empty()) s += "<" + f.generics + ">";
  s += "(";
  for (size_t i = 0; i < f.args.size(); ++i) s += (i ? ", " : "") + f.args[i].name + ": " + format_type(f.args[i]);
  s += ") -> ";
  if (f.results.size() == 1) return s + format_type(f.results[0]);
  s += "(";
  for (size_t i = 0; i < f.results.size(); ++i) s += (i ? ", " : "") + format_type(f.results[i]);
  return s + ")";
}

}  // namespace linnet::card
