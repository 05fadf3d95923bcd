#include "layers/card.h"

#include "core/error.h"
#include "layers/card_args.h"
#include "layers/card_blocks.h"
#include "layers/model_definition.h"

namespace linnet::card {

namespace {

Function entry_fn(std::string name, std::string generics, std::vector<Arg> args, std::vector<Arg> results) {
  return Function{"pub entry", std::move(name), std::move(generics), std::move(args), std::move(results)};
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
  static const std::vector<Block> table = seed_blocks();
  return table;
}

std::vector<std::pair<std::string, int64_t>> extra_generics(const ModelConfig& c) {
  std::vector<std::pair<std::string, int64_t>> out;
  if (c.llama_shaped()) return out;
  out.emplace_back("D", c.head_dim());
  if (c.sliding_window && c.any_sliding()) out.emplace_back("Window", *c.sliding_window);
  if (c.moe()) {
    out.emplace_back("Experts", c.experts);
    out.emplace_back("TopK", c.experts_per_token);
    out.emplace_back("ExpertInner", c.expert_inner);
    if (c.shared_expert_inner > 0) out.emplace_back("SharedInner", c.shared_expert_inner);
  }
  return out;
}

// Each architecture's own (layers/card_blocks.h); Llama's without one.
std::vector<Block> blocks_for(const ModelConfig& c) { return definition_of(c).blocks(c); }

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
