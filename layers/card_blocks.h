// The card's blocks built from shared builders, each told the family's namespace and options:
// the seed's (Llama's) and those an architecture's file asks for (architectures/*.cpp).
#pragma once
#include <string>
#include <vector>

#include "layers/card.h"

namespace linnet::card {

// How an architecture's blocks differ from the plain Llama decoder's, as its file says. What
// one config decides (a window, the scales, RoPEs, NoPE layers, which layers are sparse) the
// builders read from ModelConfig.
struct FamilyOptions {
  // What the config does not say. The q/k norms, the norms' placement, RmsNorm1p, GeGlu and
  // the experts' tensor names are read from the config (its architecture states them once).
  std::string ns = "llama";    // its blocks' namespace: gemma3::DecoderLayer, gemma3.attention::…
  bool fused_qkv = false;      // q/k/v read from one qkv_proj tensor (Phi-3)
  bool fused_gate_up = false;  // gate/up read from one gate_up_proj tensor (Phi-3)
};

// The seed's blocks for a Llama-shaped config (ModelConfig::llama_shaped), else the family's:
// its DecoderLayer, GroupedQueryAttention and Model with the head dim D as a generic of its own
// and the members the options and the config give, its norm and MLP blocks, and with experts
// the SparseMoe, Router and Expert blocks. Alphabetical.
std::vector<Block> family_blocks(const ModelConfig& config, const FamilyOptions& family);

// The seed's blocks (card::blocks()).
std::vector<Block> seed_blocks();

}  // namespace linnet::card
