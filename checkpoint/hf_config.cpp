#include "checkpoint/hf_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace linnet {

namespace {

using nlohmann::json;

struct Reader {
  const json& j;
  const std::string& source;

  [[noreturn]] void fail(const std::string& msg) const { throw Error(str(source, ": ", msg)); }

  int64_t positive(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!j.contains(key) || j[key].is_null()) {
      if (fallback) return *fallback;
      fail(str("missing required key '", key, "'"));
    }
    const json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0)
      fail(str("'", key, "' must be a positive integer, got ", v.dump()));
    return v.get<int64_t>();
  }
  double number(const char* key, double fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number()) fail(str("'", key, "' must be a number, got ", j[key].dump()));
    return j[key].get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) fail(str("'", key, "' must be true or false, got ", j[key].dump()));
    return j[key].get<bool>();
  }
  std::optional<int64_t> token_id(const char* key) const {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    const json& v = j[key];
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int64_t>();  // first of several
    fail(str("'", key, "' must be a token id, got ", v.dump()));
  }
};

RopeScaling parse_rope_scaling(const Reader& r) {
  RopeScaling s;
  if (!r.j.contains("rope_scaling") || r.j["rope_scaling"].is_null()) return s;
  const json& rs = r.j["rope_scaling"];
  if (!rs.is_object()) r.fail(str("'rope_scaling' must be an object or null, got ", rs.dump()));
  std::string type;
  if (rs.contains("rope_type")) type = rs["rope_type"].is_string() ? rs["rope_type"].get<std::string>() : "?";
  else if (rs.contains("type")) type = rs["type"].is_string() ? rs["type"].get<std::string>() : "?";
  Reader sub{rs, r.source};
  if (type == "default") return s;
  if (type == "linear") {
    s.type = RopeScaling::Type::linear;
  } else if (type == "llama3") {
    s.type = RopeScaling::Type::llama3;
    s.low_freq_factor = sub.number("low_freq_factor", 1.0);
    s.high_freq_factor = sub.number("high_freq_factor", 4.0);
    s.original_max_position = sub.positive("original_max_position_embeddings");
    if (!(s.high_freq_factor > s.low_freq_factor))
      r.fail("rope_scaling: high_freq_factor must exceed low_freq_factor");
  } else {
    r.fail(str("unsupported rope_scaling type '", type,
               "' (supported: llama3, linear, default, or null)"));
  }
  s.factor = sub.number("factor", 0.0);
  if (!(s.factor > 0)) r.fail(str("rope_scaling: 'factor' must be positive, got ", rs.value("factor", json()).dump()));
  return s;
}

}  // namespace

ModelConfig parse_hf_config(const json& j, const std::string& source) {
  if (!j.is_object()) throw Error(str(source, ": config must be a JSON object"));
  Reader r{j, source};
  ModelConfig c;
  c.model_type = j.value("model_type", std::string("llama"));
  if (c.model_type != "llama" && c.model_type != "qwen2")
    r.fail(str("unsupported model_type '", c.model_type, "' (supported: llama, qwen2)"));
  c.vocab = r.positive("vocab_size");
  c.hidden = r.positive("hidden_size");
  c.heads = r.positive("num_attention_heads");
  c.kv_heads = r.positive("num_key_value_heads", c.heads);
  c.inner = r.positive("intermediate_size");
  c.layers = r.positive("num_hidden_layers");
  c.max_position = r.positive("max_position_embeddings", 2048);
  if (c.hidden % c.heads != 0)
    r.fail(str("hidden_size ", c.hidden, " does not divide by num_attention_heads ", c.heads));
  if (c.heads % c.kv_heads != 0)
    r.fail(str("num_attention_heads ", c.heads, " does not divide by num_key_value_heads ", c.kv_heads));
  if (c.head_dim() % 2 != 0) r.fail(str("head dim ", c.head_dim(), " must be even for RoPE"));
  if (j.contains("head_dim") && !j["head_dim"].is_null() &&
      (!j["head_dim"].is_number_integer() || j["head_dim"].get<int64_t>() != c.head_dim()))
    r.fail(str("head_dim ", j["head_dim"].dump(), " differs from hidden_size/num_attention_heads = ",
               c.head_dim(), " (unsupported)"));
  const std::string act = j.value("hidden_act", std::string("silu"));
  if (act != "silu") r.fail(str("unsupported hidden_act '", act, "' (supported: silu)"));
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0)) r.fail("'rms_norm_eps' must be positive");
  c.rope_theta = r.number("rope_theta", 10000.0);
  if (!(c.rope_theta > 0)) r.fail("'rope_theta' must be positive");
  c.rope = parse_rope_scaling(r);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  const bool attention_bias = r.boolean("attention_bias", false);
  c.qkv_bias = attention_bias || c.model_type == "qwen2";
  c.o_bias = attention_bias;
  c.mlp_bias = r.boolean("mlp_bias", false);
  if (r.boolean("use_sliding_window", false)) r.fail("sliding-window attention is not supported");
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_string()) r.fail(str("'", key, "' must be a string"));
    const std::string t = j[key].get<std::string>();
    if (t == "bfloat16") c.dtype = DType::bf16;
    else if (t == "float16") c.dtype = DType::f16;
    else if (t == "float32") c.dtype = DType::f32;
    else r.fail(str("unsupported ", key, " '", t, "' (supported: bfloat16, float16, float32)"));
    break;
  }
  c.bos_token_id = r.token_id("bos_token_id");
  c.eos_token_id = r.token_id("eos_token_id");
  return c;
}

ModelConfig load_hf_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::string file = fs::is_directory(path) ? (fs::path(path) / "config.json").string() : path;
  std::ifstream in(file);
  if (!in) throw Error(str(file, ": cannot open config (", fs::exists(file) ? "unreadable" : "no such file", ")"));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(str(file, ": malformed JSON: ", e.what()));
  }
  return parse_hf_config(j, file);
}

json to_hf_config(const ModelConfig& c) {
  json j = {
      {"architectures", {c.model_type == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", c.model_type},
      {"hidden_act", "silu"},
      {"hidden_size", c.hidden},
      {"intermediate_size", c.inner},
      {"num_hidden_layers", c.layers},
      {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads},
      {"vocab_size", c.vocab},
      {"max_position_embeddings", c.max_position},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"torch_dtype", c.dtype == DType::bf16 ? "bfloat16" : c.dtype == DType::f16 ? "float16" : "float32"},
  };
  if (c.model_type == "llama") {
    j["attention_bias"] = c.o_bias;
    j["mlp_bias"] = c.mlp_bias;
  }
  if (c.rope.type == RopeScaling::Type::none) {
    j["rope_scaling"] = nullptr;
  } else if (c.rope.type == RopeScaling::Type::linear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope.factor}};
  } else {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope.factor},
                         {"low_freq_factor", c.rope.low_freq_factor},
                         {"high_freq_factor", c.rope.high_freq_factor},
                         {"original_max_position_embeddings", c.rope.original_max_position}};
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_id) j["eos_token_id"] = *c.eos_token_id;
  return j;
}

}  // namespace linnet
