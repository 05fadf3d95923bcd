// How this rank's parameters go from a WeightSource to the backend: each read as its slice on
// this shard (layers/parameters.h), rounded to T, then held as the backend keeps it — matrices
// in weight_dtype(T), laid out for its products once; the rest in the compute dtype; norms as
// the family forms them. Each source is let go of as soon as it is copied, so a load holds the
// weights once, not beside the file. The network asks for its parameters by card name.
#pragma once
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "layers/generics.h"
#include "layers/rms_norm.h"
#include "layers/weight_source.h"

namespace linnet {

class WeightLoader {
 public:
  WeightLoader(const ModelConfig& config, const Generics& g, WeightSource& weights, Backend& backend, int64_t shard);

  // The parameter table's row of a card name ("layers[0].attention.o_proj.weight").
  const ParamSpec& spec(const std::string& card_name) const;
  // This shard's slice on the device: a matrix in the backend's layout, else as it is.
  Tensor param(const std::string& card_name);
  // A table of vectors [R, C] (gpt-oss's experts' biases, a row each): its slice rounded to T,
  // in the compute dtype, uploaded as it is (not laid out as a matrix).
  Tensor table(const std::string& card_name);
  // Tables stacked by rows into one (Gated DeltaNet's conv taps of its q, k and v channels).
  Tensor table(const std::vector<std::string>& card_names);
  // Slices stacked by rows into one device tensor (q|k|v, gate|up; biases too).
  Tensor stacked(const std::vector<std::string>& card_names);
  // An RMSNorm of the model's eps; Gemma's (1 + w) weight formed in f32 as transformers forms
  // it, and kept in f32 on every backend (the norm ops read any float weight).
  RmsNorm norm(const std::string& card_name);
  // A matrix by the model's name for it ("layers[0].attention.qkv_proj.weight", shape rows ×
  // cols on this shard): from a file already in the backend's layout where the source has one
  // (one shard only), else read from its parts. Recorded in matrices().
  Tensor matrix(const std::string& name, const std::vector<std::string>& parts, const Shape& shape);

  // Latent attention's kv_b_proj [Heads/Shards·(Nope + V), KvLora] on this shard as the
  // absorbed form multiplies by it (layers/latent_attention.h): each head's key rows transposed,
  // w_uk [Heads/Shards·KvLora, Nope], and its value rows, w_uv [Heads/Shards·V, KvLora] — the
  // values rounded to T as the checkpoint's matrix holds them, only moved (a quantized one
  // dequantized first: held in T).
  std::pair<Tensor, Tensor> absorbed_kv_b(const std::string& card_name, int64_t heads, int64_t nope, int64_t v,
                                          int64_t kv_lora);

  // Every matrix as the backend holds it, by the model's name (what a packed file saves).
  std::vector<std::pair<std::string, Tensor>> take_matrices() { return std::move(matrices_); }

 private:
  Tensor host(const std::string& card_name);  // the slice on the host, in the dtype it is held in
  Tensor up(const Tensor& t);                 // to the device, the host copy let go of
  // Parts stored quantized (ParamSpec::layout), each with its scales, as the backend holds them.
  Tensor quantized_matrix(const std::vector<std::string>& parts);
  // The same parts read and checked, with the layout their dequantization rounds by.
  std::pair<std::vector<Backend::QuantizedPart>, WeightLayout> quantized_parts(const std::vector<std::string>& parts);

  const ModelConfig& config_;
  const Generics& g_;
  WeightSource& weights_;
  Backend& be_;
  int64_t shard_;
  DType matrix_dtype_, act_;
  std::unordered_map<std::string, ParamSpec> specs_;
  std::vector<std::pair<std::string, Tensor>> matrices_;
};

}  // namespace linnet
