// The model card as data: every entry's signature and every block's members and functions.
// `linnet inspect` prints it; entry validation (layers/validate.h) and the launcher read the
// same table, so the card, the checks and the command line cannot drift apart.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "layers/model_config.h"

namespace linnet::card {

// One argument or result: a tensor `Tensor[dims; dtype]` or, with no dims, a scalar `dtype`.
// Dims are generics' names ("Batch", "S"), literals ("1") or expressions ("2 * Batch").
struct Arg {
  std::string name;  // empty for a result
  std::vector<std::string> dims;
  std::string dtype;  // "i32", "i64", "f32" or "T"
  bool is_tensor = true;
};

struct Function {
  std::string kind;      // "pub entry", "pub fn" or "fn"
  std::string name;
  std::string generics;  // "B: Dim, S: Dim", or empty
  std::vector<Arg> args;
  std::vector<Arg> results;  // more than one prints as a tuple
};

struct Block {
  std::string name;       // "Linear"
  std::string header;     // "std.nn.linear::Linear<In: Dim, Out: Dim, T: Float = bf16>"
  std::vector<std::string> members;  // "param weight: Tensor[Out, In; T]"
  std::vector<Function> functions;
};

// The Model's 17 entries, in the card's order.
const std::vector<Function>& entries();
// Throws linnet::Error for a name that is not an entry.
const Function& entry(std::string_view name);
// Every block, in the card's (alphabetical) order.
const std::vector<Block>& blocks();
// The blocks as a checkpoint's architecture has them (its ModelDefinition, built by
// layers/card_blocks.h): the seed's for a Llama-shaped model, else with the family's blocks
// (GeGlu, RmsNorm1p), members (q/k norms, pre/post norms, window, scales, soft-caps, RoPEs per
// layer kind) and the head dim D as a generic of its own.
std::vector<Block> blocks_for(const ModelConfig& config);
// The generics a family adds to the seed's (name, value): D when head_dim ≠ H / Heads, Window.
std::vector<std::pair<std::string, int64_t>> extra_generics(const ModelConfig& config);

std::string format_type(const Arg& a);        // "Tensor[B, S; i32]" or "i32"
std::string format_signature(const Function& f);  // "forward<B: Dim, S: Dim>(tokens: ...) -> ..."

}  // namespace linnet::card
