#include "checkpoint/write_weights.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/random_weights.h"
#include "checkpoint/safetensors.h"
#include "core/files.h"
#include "layers/parameters.h"

namespace linnet {

namespace fs = std::filesystem;

void write_random_weights(const ModelConfig& c, const std::string& dir, DType dtype, uint64_t seed) {
  const Generics g = bind_generics(c, RunOptions{1, 0, 1, 1, dtype});
  fs::create_directories(dir);
  SafetensorsWriter w((fs::path(dir) / "model.safetensors").string());
  w.set_metadata("format", "pt");
  w.set_metadata("linnet", str("random weights, seed ", seed));
  std::vector<ParamSpec> specs;
  std::set<std::string> seen;
  for (auto& p : parameter_specs(c, g))
    if (seen.insert(p.hf_name).second) specs.push_back(p);  // tied lm_head is the embedding
  for (const auto& p : specs) w.declare(p.hf_name, dtype, p.stored_shape());  // fused parts: the whole tensor
  constexpr int64_t kChunk = 1 << 22;
  std::vector<float> values;
  for (const auto& p : specs) {
    const int64_t n = p.stored_shape().numel();
    for (int64_t first = 0; first < n; first += kChunk) {
      const int64_t count = std::min(kChunk, n - first);
      values.resize(static_cast<size_t>(count));
      random_values(seed, p.hf_name, p.stored_shape(), first, count, values.data());
      Tensor t = Tensor::from_floats({count}, values, dtype);
      w.write(p.hf_name, t.data(), t.nbytes());
    }
  }
  w.finish();
}

ModelConfig import_llama2c_weights(const std::string& bin_path, const std::string& dir) {
  std::ifstream in(bin_path, std::ios::binary);
  if (!in) throw Error(str(bin_path, ": cannot open"));
  const auto file_size = static_cast<int64_t>(fs::file_size(bin_path));
  int32_t h[7];
  if (!in.read(reinterpret_cast<char*>(h), sizeof h)) throw Error(str(bin_path, ": truncated llama2.c header"));
  const int64_t dim = h[0], hidden = h[1], layers = h[2], heads = h[3], kv_heads = h[4], seq = h[6];
  const bool shared = h[5] > 0;
  const int64_t vocab = shared ? h[5] : -static_cast<int64_t>(h[5]);
  for (int i = 0; i < 7; ++i)
    if (h[i] == 0 || (i != 5 && h[i] < 0)) throw Error(str(bin_path, ": header value ", i, " = ", h[i], " is not a size"));
  if (dim % heads || heads % kv_heads || (dim / heads) % 2)
    throw Error(str(bin_path, ": dim ", dim, ", heads ", heads, ", kv heads ", kv_heads, " do not fit together"));
  const int64_t hd = dim / heads, kv_dim = kv_heads * hd;
  // Layout: embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, RoPE tables, [wcls].
  const int64_t floats = vocab * dim + layers * (2 * dim + dim * dim * 2 + 2 * kv_dim * dim + 3 * hidden * dim) + dim +
                         seq * hd + (shared ? 0 : vocab * dim);
  if (file_size != 28 + floats * 4)
    throw Error(str(bin_path, ": size ", file_size, " bytes does not match its header (expected ", 28 + floats * 4,
                    " for dim ", dim, ", ", layers, " layers, vocab ", vocab, ")"));

  ModelConfig c;
  c.vocab = vocab;
  c.hidden = dim;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.inner = hidden;
  c.layers = layers;
  c.max_position = seq;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = shared;
  c.dtype = DType::f32;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  fs::create_directories(dir);

  auto read = [&](Shape s) {
    Tensor t = Tensor::empty(s, DType::f32);
    if (!in.read(static_cast<char*>(t.data()), static_cast<std::streamsize>(t.nbytes())))
      throw Error(str(bin_path, ": truncated"));
    return t;
  };
  // Meta pairs (2i, 2i+1) of each head → Hugging Face halves (i, i + D/2).
  auto permute = [&](const Tensor& w, int64_t nh) {
    Tensor out = Tensor::empty(w.shape(), DType::f32);
    const int64_t cols = w.dim(1);
    for (int64_t head = 0; head < nh; ++head)
      for (int64_t t = 0; t < 2; ++t)
        for (int64_t i = 0; i < hd / 2; ++i)
          std::copy_n(w.ptr<float>() + (head * hd + 2 * i + t) * cols, cols,
                      out.ptr<float>() + (head * hd + t * hd / 2 + i) * cols);
    return out;
  };
  std::vector<std::pair<std::string, Tensor>> tensors;
  auto per_layer = [&](const std::string& name, Shape s, int64_t permute_heads = 0) {
    for (int64_t l = 0; l < layers; ++l) {
      Tensor t = read(s);
      tensors.emplace_back("model.layers." + std::to_string(l) + "." + name, permute_heads ? permute(t, permute_heads) : t);
    }
  };
  tensors.emplace_back("model.embed_tokens.weight", read({vocab, dim}));
  per_layer("input_layernorm.weight", {dim});
  per_layer("self_attn.q_proj.weight", {dim, dim}, heads);
  per_layer("self_attn.k_proj.weight", {kv_dim, dim}, kv_heads);
  per_layer("self_attn.v_proj.weight", {kv_dim, dim});
  per_layer("self_attn.o_proj.weight", {dim, dim});
  per_layer("post_attention_layernorm.weight", {dim});
  per_layer("mlp.gate_proj.weight", {hidden, dim});
  per_layer("mlp.down_proj.weight", {dim, hidden});
  per_layer("mlp.up_proj.weight", {hidden, dim});
  tensors.emplace_back("model.norm.weight", read({dim}));
  read({seq, hd});  // the old RoPE tables: unused
  if (!shared) tensors.emplace_back("lm_head.weight", read({vocab, dim}));
  save_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  for (const char* tok : {"tokenizer.model", "tokenizer.bin"}) {
    const fs::path src = fs::path(bin_path).parent_path() / tok;
    if (!fs::exists(src)) continue;
    write_text_file((fs::path(dir) / tok).string(), read_text_file(src.string(), "tokenizer"), "the tokenizer");
  }
  // What makes transformers 5 (so lm-eval and the openai tests) read the folder as linnet
  // does: llama2.c's Llama 2 SentencePiece vocabulary, with BOS (docs/tokenizers.md). Without
  // it transformers adds no BOS to a tokenizer.model and every score differs.
  if (fs::exists(fs::path(dir) / "tokenizer.model"))
    write_text_file((fs::path(dir) / "tokenizer_config.json").string(),
                    nlohmann::json{{"tokenizer_class", "LlamaTokenizer"}, {"add_bos_token", true},
                                   {"add_eos_token", false}, {"bos_token", "<s>"}, {"eos_token", "</s>"},
                                   {"unk_token", "<unk>"}}.dump(2) + "\n",
                    "the tokenizer config");
  return c;
}

}  // namespace linnet
