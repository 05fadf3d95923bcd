// config.json → ModelConfig. Reads both spellings transformers has written: the classic
// top-level `rope_theta` / `rope_scaling` and transformers 5's `rope_parameters` (also its
// per-layer-type form), and refuses every key that changes the model's math in a way linnet
// does not implement (docs/config.md lists them), so a checkpoint never runs silently wrong.
#include "checkpoint/hf_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"

namespace linnet {

namespace {

using nlohmann::json;

constexpr int64_t kMaxSize = (int64_t{1} << 31) - 1;

bool given(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

struct Reader {
  const json& j;
  const std::string& source;

  [[noreturn]] void fail(const std::string& msg) const { throw Error(str(source, ": ", msg)); }

  int64_t positive(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!given(j, key)) {
      if (fallback) return *fallback;
      fail(str("missing required key '", key, "'"));
    }
    const json& v = j[key];
    // Sizes stay below 2³¹ so that products of two of them fit in 64 bits.
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > kMaxSize)
      fail(str("'", key, "' must be a positive integer below 2^31, got ", v.dump()));
    return v.get<int64_t>();
  }
  double number(const char* key, double fallback) const {
    if (!given(j, key)) return fallback;
    if (!j[key].is_number()) fail(str("'", key, "' must be a number, got ", j[key].dump()));
    const double v = j[key].get<double>();
    if (!std::isfinite(v)) fail(str("'", key, "' must be finite, got ", j[key].dump()));
    return v;
  }
  bool boolean(const char* key, bool fallback) const {
    if (!given(j, key)) return fallback;
    if (!j[key].is_boolean()) fail(str("'", key, "' must be true or false, got ", j[key].dump()));
    return j[key].get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!given(j, key)) return fallback;
    if (!j[key].is_string()) fail(str("'", key, "' must be a string, got ", j[key].dump()));
    return j[key].get<std::string>();
  }
  // An id, or a list of ids (eos_token_id of Llama 3 Instruct: 128001, 128008, 128009).
  // Each must be a token of the vocabulary: a larger one would wrap where ids are 32-bit,
  // and could never be generated anyway.
  std::vector<int64_t> token_ids(const char* key, int64_t vocab) const {
    if (!given(j, key)) return {};
    const json& v = j[key];
    std::vector<int64_t> out;
    for (const json& e : v.is_array() ? v : json::array({v})) {
      if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > INT64_MAX) || e.get<int64_t>() < 0)
        fail(str("'", key, "' must be a token id or a list of them, got ", v.dump()));
      if (e.get<int64_t>() >= vocab)
        fail(str("'", key, "' = ", e.dump(), " is not a token id: vocab_size is ", vocab));
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
};

// ---- RoPE --------------------------------------------------------------------------------

// One RoPE description: from `rope_scaling` (+ top-level rope_theta) or `rope_parameters`.
struct RopeSpec {
  std::optional<double> theta;
  RopeScaling scaling;
};

// Reads an object with rope_type (or the older "type") and its parameters; `key` names it in
// errors ("rope_scaling", "rope_parameters", "rope_parameters.full_attention").
RopeSpec parse_rope_object(const Reader& r, const json& o, const std::string& key) {
  if (!o.is_object()) r.fail(str("'", key, "' must be an object or null, got ", o.dump()));
  Reader sub{o, r.source};
  RopeSpec spec;
  if (given(o, "rope_theta")) {
    spec.theta = sub.number("rope_theta", 0);
    if (!(*spec.theta > 0)) r.fail(str(key, ".rope_theta must be positive, got ", o["rope_theta"].dump()));
  }
  if (given(o, "partial_rotary_factor") && sub.number("partial_rotary_factor", 1.0) != 1.0)
    r.fail(str(key, ".partial_rotary_factor ", o["partial_rotary_factor"].dump(),
               " is not supported (linnet rotates the whole head: 1.0)"));
  std::string type = "default";
  for (const char* k : {"rope_type", "type"})
    if (given(o, k)) {
      if (!o[k].is_string()) r.fail(str(key, ".", k, " must be a string, got ", o[k].dump()));
      type = o[k].get<std::string>();
      break;
    }
  RopeScaling& s = spec.scaling;
  if (type == "default") return spec;
  if (type == "linear") {
    s.type = RopeScaling::Type::linear;
  } else if (type == "llama3") {
    s.type = RopeScaling::Type::llama3;
    s.low_freq_factor = sub.number("low_freq_factor", 1.0);
    s.high_freq_factor = sub.number("high_freq_factor", 4.0);
    s.original_max_position = sub.positive("original_max_position_embeddings");
    if (!(s.high_freq_factor > s.low_freq_factor)) r.fail(str(key, ": high_freq_factor must exceed low_freq_factor"));
  } else {
    r.fail(str("unsupported ", key, " rope_type '", type, "' (supported: default, linear, llama3)"));
  }
  s.factor = sub.number("factor", 0.0);
  if (!(s.factor > 0)) r.fail(str(key, ": 'factor' must be positive, got ", o.value("factor", json()).dump()));
  return spec;
}

bool same_scaling(const RopeScaling& a, const RopeScaling& b) {
  if (a.type != b.type) return false;
  if (a.type == RopeScaling::Type::none) return true;
  if (a.factor != b.factor) return false;
  return a.type != RopeScaling::Type::llama3 ||
         (a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
          a.original_max_position == b.original_max_position);
}

std::string describe(const RopeScaling& s) {
  switch (s.type) {
    case RopeScaling::Type::none: return "default";
    case RopeScaling::Type::linear: return str("linear (factor ", s.factor, ")");
    case RopeScaling::Type::llama3:
      return str("llama3 (factor ", s.factor, ", low_freq_factor ", s.low_freq_factor, ", high_freq_factor ",
                 s.high_freq_factor, ", original_max_position_embeddings ", s.original_max_position, ")");
  }
  return "?";
}

// rope_parameters: one RoPE object, or transformers' per-layer-type form
// {"full_attention": {...}, "sliding_attention": {...}} (one model, several RoPEs).
RopeSpec parse_rope_parameters(const Reader& r, const json& o) {
  if (!o.is_object()) r.fail(str("'rope_parameters' must be an object or null, got ", o.dump()));
  const bool per_layer_type =
      !o.empty() && std::all_of(o.begin(), o.end(), [](const json& v) { return v.is_object(); });
  if (!per_layer_type) return parse_rope_object(r, o, "rope_parameters");
  // transformers reads this form only for models whose layers have types of their own RoPE
  // (Gemma 3, …); a Llama or Qwen2 config reads rope_parameters' own top-level keys, finds no
  // rope_type and runs default RoPE — so linnet would compute another model. Refused.
  const std::string type = r.j.value("model_type", "");
  if (type == "llama" || type == "qwen2" || type == "mistral")
    r.fail(str("rope_parameters in the per-layer-type form (keys ", o.begin().key(),
               ", …) is not read so by transformers for model_type '", type,
               "' (it would run default RoPE): give one RoPE object {\"rope_type\", \"rope_theta\", …}"));
  std::optional<RopeSpec> first;
  std::string first_key;
  for (const auto& [layer_type, v] : o.items()) {
    RopeSpec spec = parse_rope_object(r, v, "rope_parameters." + layer_type);
    if (!first) {
      first = spec, first_key = layer_type;
    } else if (spec.theta != first->theta || !same_scaling(spec.scaling, first->scaling)) {
      r.fail(str("rope_parameters.", layer_type, " differs from rope_parameters.", first_key,
                 ": per-layer-type RoPE is not supported"));
    }
  }
  return *first;
}

// The model's RoPE from whichever spellings are present; both present must agree.
void parse_rope(const Reader& r, ModelConfig& c) {
  RopeSpec classic;
  if (given(r.j, "rope_scaling")) classic = parse_rope_object(r, r.j["rope_scaling"], "rope_scaling");
  if (classic.theta) r.fail("'rope_scaling' must not carry rope_theta (it is a top-level key)");
  if (given(r.j, "rope_theta")) {
    classic.theta = r.number("rope_theta", 0);
    if (!(*classic.theta > 0)) r.fail("'rope_theta' must be positive");
  }
  if (given(r.j, "partial_rotary_factor") && r.number("partial_rotary_factor", 1.0) != 1.0)
    r.fail(str("partial_rotary_factor ", r.j["partial_rotary_factor"].dump(),
               " is not supported (linnet rotates the whole head: 1.0)"));
  RopeSpec spec = classic;
  if (given(r.j, "rope_parameters")) {
    const RopeSpec v5 = parse_rope_parameters(r, r.j["rope_parameters"]);
    if (classic.theta && v5.theta && *classic.theta != *v5.theta)
      r.fail(str("rope_theta ", *classic.theta, " and rope_parameters.rope_theta ", *v5.theta, " disagree"));
    if (given(r.j, "rope_scaling") && !same_scaling(classic.scaling, v5.scaling))
      r.fail(str("rope_scaling (", describe(classic.scaling), ") and rope_parameters (", describe(v5.scaling),
                 ") disagree"));
    spec.scaling = v5.scaling;
    if (v5.theta) spec.theta = v5.theta;
  }
  c.rope_theta = spec.theta.value_or(10000.0);
  c.rope = spec.scaling;
}

// ---- what linnet does not implement ------------------------------------------------------

// The sliding window some layer applies, as transformers decides it: `layer_types` when given;
// else Qwen2's use_sliding_window for layers from max_window_layers on; else (Llama, which has
// no such key) any window the config sets, to be safe.
std::optional<int64_t> sliding_window(const Reader& r, const ModelConfig& c) {
  bool sliding = false;
  if (given(r.j, "layer_types")) {
    const json& t = r.j["layer_types"];
    if (!t.is_array() || static_cast<int64_t>(t.size()) != c.layers)
      r.fail(str("'layer_types' must list one type per layer (", c.layers, "), got ", t.dump()));
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string type = t[i].is_string() ? t[i].get<std::string>() : t[i].dump();
      if (type == "sliding_attention") sliding = true;
      else if (type != "full_attention")
        r.fail(str("layer_types[", i, "] '", type, "' is not supported (full_attention, sliding_attention)"));
    }
  } else if (c.model_type == "qwen2") {
    int64_t full_layers = 28;  // transformers' Qwen2Config default
    if (given(r.j, "max_window_layers")) {
      const json& m = r.j["max_window_layers"];
      if (!m.is_number_integer() || m.get<int64_t>() < 0)
        r.fail(str("'max_window_layers' must be a non-negative integer, got ", m.dump()));
      full_layers = m.get<int64_t>();
    }
    sliding = r.boolean("use_sliding_window", false) && given(r.j, "sliding_window") && full_layers < c.layers;
  } else {
    sliding = r.boolean("use_sliding_window", false) || given(r.j, "sliding_window");
  }
  if (!sliding) return std::nullopt;
  if (!given(r.j, "sliding_window")) r.fail("layers use sliding_attention, but 'sliding_window' is not set");
  return r.positive("sliding_window");
}

// Keys whose presence (with a value other than the neutral one) changes the model's math.
void refuse_unsupported(const Reader& r) {
  const json& j = r.j;
  auto refuse = [&](const char* key, const char* why) {
    r.fail(str("'", key, "' = ", j[key].dump(), " is not supported (", why, ")"));
  };
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (given(j, key)) refuse(key, "logit soft-capping");
  if (given(j, "pretraining_tp") && !(j["pretraining_tp"].is_number_integer() && j["pretraining_tp"].get<int64_t>() <= 1))
    refuse("pretraining_tp", "transformers splits each projection into pretraining_tp slices; linnet runs 1");
  for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"})
    if (given(j, key) && !(j[key].is_number_integer() && j[key].get<int64_t>() == 0))
      refuse(key, "mixture-of-experts layers");
  for (const char* key : {"use_qk_norm", "qk_layernorm", "rope_interleaved"})
    if (given(j, key) && j[key] != false) refuse(key, "linnet has no q/k norms and rotates halves, not pairs");
  if (given(j, "no_rope_layers")) refuse("no_rope_layers", "every layer applies RoPE");
  if (given(j, "query_pre_attn_scalar")) refuse("query_pre_attn_scalar", "attention scale is 1/sqrt(head_dim)");
  for (const char* key : {"embedding_multiplier", "logits_scaling", "residual_multiplier", "attention_multiplier"})
    if (given(j, key) && !(j[key].is_number() && j[key].get<double>() == 1.0)) refuse(key, "no scaling multipliers");
  if (given(j, "quantization_config")) refuse("quantization_config", "quantized weights; linnet reads bf16, f16, f32");
}

}  // namespace

ModelConfig parse_hf_config(const json& j, const std::string& source) {
  if (!j.is_object()) throw Error(str(source, ": config must be a JSON object"));
  Reader r{j, source};
  ModelConfig c;
  c.model_type = r.string("model_type", "llama");
  if (c.model_type != "llama" && c.model_type != "qwen2")
    r.fail(str("unsupported model_type '", c.model_type, "' (supported: llama, qwen2)"));
  if (given(j, "architectures")) {
    if (!j["architectures"].is_array()) r.fail(str("'architectures' must be a list, got ", j["architectures"].dump()));
    for (const json& a : j["architectures"])
      if (a != "LlamaForCausalLM" && a != "Qwen2ForCausalLM")
        r.fail(str("unsupported architectures entry ", a.dump(), " (supported: LlamaForCausalLM, Qwen2ForCausalLM)"));
  }
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
  if (given(j, "head_dim") && (!j["head_dim"].is_number_integer() || j["head_dim"].get<int64_t>() != c.head_dim()))
    r.fail(str("head_dim ", j["head_dim"].dump(), " differs from hidden_size/num_attention_heads = ", c.head_dim(),
               " (unsupported)"));
  for (const char* key : {"hidden_act", "hidden_activation"}) {
    const std::string act = r.string(key, "silu");
    if (act != "silu" && act != "swish") r.fail(str("unsupported ", key, " '", act, "' (supported: silu)"));
  }
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0)) r.fail("'rms_norm_eps' must be positive");
  parse_rope(r, c);
  refuse_unsupported(r);
  c.sliding_window = sliding_window(r, c);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  const bool attention_bias = r.boolean("attention_bias", false);
  c.qkv_bias = attention_bias || c.model_type == "qwen2";
  c.o_bias = attention_bias;
  c.mlp_bias = r.boolean("mlp_bias", false);
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!given(j, key)) continue;
    const std::string t = r.string(key, "");
    if (t == "bfloat16") c.dtype = DType::bf16;
    else if (t == "float16") c.dtype = DType::f16;
    else if (t == "float32") c.dtype = DType::f32;
    else r.fail(str("unsupported ", key, " '", t, "' (supported: bfloat16, float16, float32)"));
    break;
  }
  if (const auto bos = r.token_ids("bos_token_id", c.vocab); !bos.empty()) c.bos_token_id = bos[0];
  c.eos_token_ids = r.token_ids("eos_token_id", c.vocab);
  return c;
}

std::string not_a_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec)) return str(path, ": no such checkpoint directory");
  if (!fs::is_directory(p, ec)) {
    const std::string ext = p.extension().string();
    std::string why = str(path, ": a checkpoint is a directory (config.json + *.safetensors, as Hugging Face saves it), "
                                "not a file");
    if (ext == ".bin" || ext == ".pt")
      why += str("; for a llama2.c model (such as stories15M.bin), `linnet import-llama2c --input ", path,
                 " --out DIR` makes one");
    else if (ext == ".safetensors")
      why += str("; give the directory that holds it with its config.json (", p.has_parent_path() ? p.parent_path().string() : ".", "?)");
    else if (ext == ".gguf")
      why += "; GGUF files are llama.cpp's: linnet reads the Hugging Face checkpoint they were made from";
    return why;
  }
  if (fs::exists(p / "config.json", ec)) return "";
  std::vector<std::string> inside;
  for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec) && fs::exists(it->path() / "config.json", ec)) inside.push_back(it->path().filename().string());
  std::sort(inside.begin(), inside.end());
  if (inside.empty()) return str(path, ": not a checkpoint: it holds no config.json");
  std::string list;
  for (size_t i = 0; i < inside.size() && i < 8; ++i) list += (i ? ", " : "") + inside[i];
  if (inside.size() > 8) list += str(", … (", inside.size() - 8, " more)");
  return str(path, ": not a checkpoint (no config.json), but its subfolder", inside.size() > 1 ? "s " : " ", list,
             inside.size() > 1 ? " are checkpoints: give one of them" : " is one: give it",
             " (e.g. --checkpoint ", (p / inside[0]).string(), ")");
}

ModelConfig load_hf_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  // A checkpoint folder, or a config file itself (*.json): anything else is named for what it is.
  if (dir || fs::path(path).extension() != ".json")
    if (const std::string why = not_a_checkpoint(path); !why.empty()) throw Error(why);
  const std::string file = dir ? (fs::path(path) / "config.json").string() : path;
  ModelConfig c = parse_hf_config(read_json_file(file, "config"), file);
  // generation_config.json may name more end-of-sequence ids (and the bos id); keep them all.
  const fs::path gen = fs::path(dir ? path : fs::path(path).parent_path().string()) / "generation_config.json";
  if (fs::exists(gen, ec)) {
    const json g = read_json_file(gen.string(), "generation config");
    if (!g.is_object()) throw Error(str(gen.string(), ": generation config must be a JSON object"));
    Reader r{g, gen.string()};
    for (int64_t id : r.token_ids("eos_token_id", c.vocab))
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
        c.eos_token_ids.push_back(id);
    if (const auto bos = r.token_ids("bos_token_id", c.vocab); !c.bos_token_id && !bos.empty()) c.bos_token_id = bos[0];
  }
  return c;
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
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  if (c.sliding_window) {
    j["sliding_window"] = *c.sliding_window;
    j["use_sliding_window"] = true;
    if (c.model_type == "qwen2") j["max_window_layers"] = 0;
  }
  return j;
}

}  // namespace linnet
