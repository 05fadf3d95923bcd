// The shared builders of a network's layers from this rank's weights (layers/weight_loader.h):
// attention, the dense MLP, the experts, and a decoder layer of them with the norms its
// parameter table has. An architecture's definition (layers/model_definition.h) builds its
// layers with these, or with its own for a block they do not make.
#pragma once
#include "layers/decoder_layer.h"
#include "layers/generics.h"
#include "layers/weight_loader.h"

namespace linnet {

// Layer i's attention: q/k/v as one column-parallel product over their stacked rows (the
// card's q_proj/k_proj/v_proj are views of them), o_proj row-parallel, the options' q/k
// norms, window, scale and soft-cap.
GroupedQueryAttention load_attention(WeightLoader& w, const ModelConfig& config, const Generics& g, int64_t i,
                                     int64_t shard);
// Layer i's latent attention (ModelConfig::mla): q_a/q_b (or q_proj) and o_proj as their
// splits say, kv_a_proj whole, kv_b_proj held absorbed (WeightLoader::absorbed_kv_b).
LatentAttention load_latent_attention(WeightLoader& w, const ModelConfig& config, const Generics& g, int64_t i);
// Layer i's Gated DeltaNet (ModelConfig::linear_attention): q|k|v, z and b|a column-parallel
// by head (each one product over its stacked rows), the conv taps of its channels, out_proj
// row-parallel.
GatedDeltaNet load_gated_delta_net(WeightLoader& w, const ModelConfig& config, const Generics& g, int64_t i);
// Layer i's experts: this rank's (expert sharding) or every expert's slices (tensor sharding).
SparseMoe load_experts(WeightLoader& w, const ModelConfig& config, const Generics& g, int64_t i, int64_t shard);
// A SwiGLU under card prefix m ("layers[i].mlp.", a layer's shared experts "layers[i].mlp.shared."),
// inner rows on this shard, with gate/up/down biases or none.
SwiGlu load_swiglu(WeightLoader& w, const ModelConfig& config, const std::string& m, int64_t inner, bool biases);
// Layer i's dense MLP: gate|up as one column-parallel product, down row-parallel.
SwiGlu load_mlp(WeightLoader& w, const ModelConfig& config, const Generics& g, int64_t i);
// Layer i: its norms around the blocks (as ModelConfig places them), attention (grouped-query
// or latent), and the
// dense MLP or the experts.
DecoderLayer decoder_layer(WeightLoader& w, const ModelConfig& config, const Generics& g, int64_t i, int64_t shard);

}  // namespace linnet
