// config.json → ModelConfig. Reads both spellings transformers has written: the classic
// top-level `rope_theta` / `rope_scaling` and transformers 5's `rope_parameters` (also its
// per-layer-type form, where transformers reads it: Gemma 3), each family's own keys and
// defaults as its transformers config class has them, and refuses every key that changes the
// model's math in a way linnet does not implement (docs/config.md lists them), so a
// checkpoint never runs silently wrong.
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

// ---- families ----------------------------------------------------------------------------

// What transformers' config class of each model_type defaults to, where linnet reads it.
struct Family {
  const char* model_type;
  const char* architecture;        // the causal-LM class
  int64_t head_dim = 0;            // 0: hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  std::optional<int64_t> sliding_window;  // the config class's default window
  double rope_theta = 10000.0;
};

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {"llama", "LlamaForCausalLM", 0, 1e-6, false, std::nullopt, 10000.0},
      {"qwen2", "Qwen2ForCausalLM", 0, 1e-6, false, 4096, 10000.0},
      {"mistral", "MistralForCausalLM", 0, 1e-6, false, 4096, 10000.0},
      {"qwen3", "Qwen3ForCausalLM", 128, 1e-6, false, 4096, 10000.0},
      {"gemma2", "Gemma2ForCausalLM", 256, 1e-6, true, 4096, 10000.0},
      {"gemma3_text", "Gemma3ForCausalLM", 256, 1e-6, true, 4096, 1000000.0},
      {"phi3", "Phi3ForCausalLM", 0, 1e-5, false, std::nullopt, 10000.0},
      {"olmo2", "Olmo2ForCausalLM", 0, 1e-5, false, std::nullopt, 10000.0},
      {"granite", "GraniteForCausalLM", 0, 1e-6, false, std::nullopt, 10000.0},
      {"smollm3", "SmolLM3ForCausalLM", 0, 1e-6, true, std::nullopt, 2000000.0},
      // Mixtures of experts (issue 30).
      {"mixtral", "MixtralForCausalLM", 0, 1e-5, false, std::nullopt, 1000000.0},
      {"qwen3_moe", "Qwen3MoeForCausalLM", 0, 1e-6, false, 4096, 10000.0},
      {"olmoe", "OlmoeForCausalLM", 0, 1e-5, false, std::nullopt, 10000.0},
  };
  return table;
}

std::string family_list() {
  std::string s;
  for (const auto& f : families()) s += (s.empty() ? "" : ", ") + std::string(f.model_type);
  return s;
}

bool is_gemma(const std::string& t) { return t == "gemma2" || t == "gemma3_text"; }
bool is_moe(const std::string& t) { return t == "mixtral" || t == "qwen3_moe" || t == "olmoe"; }

// ---- RoPE --------------------------------------------------------------------------------

// One RoPE description: from `rope_scaling` (+ top-level rope_theta) or `rope_parameters`.
struct RopeSpec {
  std::optional<double> theta;
  std::optional<double> partial_rotary_factor;
  RopeScaling scaling;
};

std::vector<double> number_list(const Reader& r, const json& o, const char* key, const std::string& where) {
  if (!given(o, key)) r.fail(str(where, ": '", key, "' is required for longrope"));
  const json& v = o[key];
  std::vector<double> out;
  if (!v.is_array()) r.fail(str(where, ".", key, " must be a list of numbers, got ", v.dump()));
  for (const json& x : v) {
    if (!x.is_number() || !std::isfinite(x.get<double>()) || !(x.get<double>() > 0))
      r.fail(str(where, ".", key, " must be a list of positive numbers, got ", v.dump()));
    out.push_back(x.get<double>());
  }
  return out;
}

// Reads an object with rope_type (or the older "type") and its parameters; `key` names it in
// errors ("rope_scaling", "rope_parameters", "rope_parameters.full_attention").
RopeSpec parse_rope_object(const Reader& r, const json& o, const std::string& key, const std::string& model_type) {
  if (!o.is_object()) r.fail(str("'", key, "' must be an object or null, got ", o.dump()));
  Reader sub{o, r.source};
  RopeSpec spec;
  if (given(o, "rope_theta")) {
    spec.theta = sub.number("rope_theta", 0);
    if (!(*spec.theta > 0)) r.fail(str(key, ".rope_theta must be positive, got ", o["rope_theta"].dump()));
  }
  if (given(o, "partial_rotary_factor")) spec.partial_rotary_factor = sub.number("partial_rotary_factor", 1.0);
  std::string type = "default";
  for (const char* k : {"rope_type", "type"})
    if (given(o, k)) {
      if (!o[k].is_string()) r.fail(str(key, ".", k, " must be a string, got ", o[k].dump()));
      type = o[k].get<std::string>();
      break;
    }
  // transformers' Phi-3 config reads the older names of LongRoPE as longrope.
  if (model_type == "phi3" && (type == "su" || type == "yarn")) type = "longrope";
  RopeScaling& s = spec.scaling;
  auto factor = [&](bool required) {
    if (!given(o, "factor")) {
      if (required) r.fail(str(key, ": 'factor' must be positive, got null"));
      return;
    }
    s.factor = sub.number("factor", 0.0);
    if (!(s.factor > 0)) r.fail(str(key, ": 'factor' must be positive, got ", o["factor"].dump()));
  };
  auto original = [&](bool required) {
    if (given(o, "original_max_position_embeddings") || required)
      s.original_max_position = sub.positive("original_max_position_embeddings");
    else
      s.original_max_position = 0;  // transformers: max_position_embeddings (set by the caller)
  };
  auto attention_factor = [&] {
    if (given(o, "attention_factor")) {
      s.attention_factor = sub.number("attention_factor", 1.0);
      if (!(*s.attention_factor > 0)) r.fail(str(key, ".attention_factor must be positive"));
    }
  };
  if (type == "default") return spec;
  if (type == "linear") {
    s.type = RopeScaling::Type::linear;
    factor(true);
  } else if (type == "llama3") {
    s.type = RopeScaling::Type::llama3;
    // transformers refuses a llama3 RoPE without them (no defaults to fall back on).
    for (const char* k : {"low_freq_factor", "high_freq_factor"})
      if (!given(o, k)) r.fail(str(key, ": '", k, "' is required for rope_type llama3"));
    s.low_freq_factor = sub.number("low_freq_factor", 1.0);
    s.high_freq_factor = sub.number("high_freq_factor", 4.0);
    original(true);
    if (!(s.high_freq_factor > s.low_freq_factor)) r.fail(str(key, ": high_freq_factor must exceed low_freq_factor"));
    factor(true);
  } else if (type == "dynamic") {
    s.type = RopeScaling::Type::dynamic;
    factor(true);
  } else if (type == "yarn") {
    s.type = RopeScaling::Type::yarn;
    factor(false);
    if (!given(o, "factor")) s.factor = 0;  // max_position_embeddings / original_max_position_embeddings
    original(false);
    attention_factor();
    // transformers: `beta_fast or 32`, `beta_slow or 1` (0 and null alike take the default).
    s.beta_fast = sub.number("beta_fast", 0.0);
    if (s.beta_fast == 0) s.beta_fast = 32;
    s.beta_slow = sub.number("beta_slow", 0.0);
    if (s.beta_slow == 0) s.beta_slow = 1;
    if (given(o, "mscale")) s.mscale = sub.number("mscale", 0.0);
    if (given(o, "mscale_all_dim")) s.mscale_all_dim = sub.number("mscale_all_dim", 0.0);
    s.truncate = sub.boolean("truncate", true);
  } else if (type == "longrope") {
    s.type = RopeScaling::Type::longrope;
    factor(false);
    if (!given(o, "factor")) s.factor = 0;  // max_position_embeddings / original_max_position_embeddings
    original(false);
    attention_factor();
    s.short_factor = number_list(r, o, "short_factor", key);
    s.long_factor = number_list(r, o, "long_factor", key);
  } else {
    r.fail(str("unsupported ", key, " rope_type '", type,
               "' (supported: default, linear, llama3, dynamic, yarn, longrope)"));
  }
  return spec;
}

bool same_scaling(const RopeScaling& a, const RopeScaling& b) {
  if (a.type != b.type) return false;
  if (a.type == RopeScaling::Type::none) return true;
  return a.factor == b.factor && a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
         a.original_max_position == b.original_max_position && a.attention_factor == b.attention_factor &&
         a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow && a.mscale == b.mscale &&
         a.mscale_all_dim == b.mscale_all_dim && a.truncate == b.truncate && a.short_factor == b.short_factor &&
         a.long_factor == b.long_factor;
}

std::string describe(const RopeScaling& s) {
  switch (s.type) {
    case RopeScaling::Type::none: return "default";
    case RopeScaling::Type::linear: return str("linear (factor ", s.factor, ")");
    case RopeScaling::Type::llama3:
      return str("llama3 (factor ", s.factor, ", low_freq_factor ", s.low_freq_factor, ", high_freq_factor ",
                 s.high_freq_factor, ", original_max_position_embeddings ", s.original_max_position, ")");
    case RopeScaling::Type::dynamic: return str("dynamic (factor ", s.factor, ")");
    case RopeScaling::Type::yarn:
      return str("yarn (factor ", s.factor, ", original_max_position_embeddings ", s.original_max_position, ")");
    case RopeScaling::Type::longrope:
      return str("longrope (original_max_position_embeddings ", s.original_max_position, ")");
  }
  return "?";
}

// transformers fills what a scaled RoPE leaves out from the model: original_max_position_embeddings
// (Phi-3: its top-level key wins), yarn's and longrope's factor.
void complete(const Reader& r, RopeScaling& s, const ModelConfig& c, const std::string& key) {
  const bool scaled = s.type == RopeScaling::Type::yarn || s.type == RopeScaling::Type::longrope ||
                      s.type == RopeScaling::Type::llama3;
  if (!scaled) return;
  if (c.model_type == "phi3" && !given(r.j, "original_max_position_embeddings")) {
    // Phi3Config always has the attribute (default 4096), and it replaces the RoPE's own.
    s.original_max_position = 4096;
  } else if (given(r.j, "original_max_position_embeddings")) {
    const int64_t top = r.positive("original_max_position_embeddings");
    if (c.model_type == "phi3") s.original_max_position = top;
    else if (s.original_max_position != 0 && s.original_max_position != top)
      r.fail(str("original_max_position_embeddings ", top, " and ", key, ".original_max_position_embeddings ",
                 s.original_max_position, " disagree"));
    else s.original_max_position = top;
  }
  if (s.original_max_position == 0) s.original_max_position = c.max_position;
  if ((s.type == RopeScaling::Type::yarn || s.type == RopeScaling::Type::longrope) && s.factor == 0)
    s.factor = static_cast<double>(c.max_position) / static_cast<double>(s.original_max_position);
  if (s.type == RopeScaling::Type::longrope) {
    const size_t half = static_cast<size_t>(c.rotary_dim() / 2);
    for (const auto* f : {&s.short_factor, &s.long_factor})
      if (f->size() != half)
        r.fail(str(key, ": longrope's ", f == &s.short_factor ? "short_factor" : "long_factor", " has ", f->size(),
                   " entries; the rotary dim ", c.rotary_dim(), " needs ", half));
  }
}

// rope_parameters in transformers' per-layer-type form {"full_attention": {...},
// "sliding_attention": {...}}: keys that are layer types of the config.
bool per_layer_type_form(const json& o) {
  return o.is_object() && !o.empty() && std::all_of(o.items().begin(), o.items().end(), [](const auto& kv) {
           return (kv.key() == "full_attention" || kv.key() == "sliding_attention") &&
                  (kv.value().is_object() || kv.value().is_null());
         });
}

// The model's RoPE(s) from whichever spellings are present; both present must agree.
void parse_rope(const Reader& r, ModelConfig& c, const Family& fam) {
  const std::string& type = c.model_type;
  const bool gemma3 = type == "gemma3_text";
  RopeSpec classic;
  if (given(r.j, "rope_scaling")) classic = parse_rope_object(r, r.j["rope_scaling"], "rope_scaling", type);
  if (classic.theta) r.fail("'rope_scaling' must not carry rope_theta (it is a top-level key)");
  if (given(r.j, "rope_theta")) {
    classic.theta = r.number("rope_theta", 0);
    if (!(*classic.theta > 0)) r.fail("'rope_theta' must be positive");
  }
  std::optional<double> local_theta;  // Gemma 3's classic rope_local_base_freq
  if (given(r.j, "rope_local_base_freq")) {
    if (!gemma3) r.fail(str("'rope_local_base_freq' = ", r.j["rope_local_base_freq"].dump(),
                            " is not supported (a per-layer-type RoPE transformers reads for gemma3_text only)"));
    local_theta = r.number("rope_local_base_freq", 0);
    if (!(*local_theta > 0)) r.fail("'rope_local_base_freq' must be positive");
  }
  std::optional<double> partial;
  if (given(r.j, "partial_rotary_factor")) partial = r.number("partial_rotary_factor", 1.0);

  RopeSpec spec = classic, local;
  bool has_local = gemma3;
  if (given(r.j, "rope_parameters")) {
    const json& o = r.j["rope_parameters"];
    if (!o.is_object()) r.fail(str("'rope_parameters' must be an object or null, got ", o.dump()));
    RopeSpec v5;
    if (per_layer_type_form(o)) {
      // transformers reads this form only for models whose layers have RoPEs of their own
      // (Gemma 3); any other model reads rope_parameters' own top-level keys, finds no
      // rope_type and runs default RoPE — so linnet would compute another model. Refused.
      if (!gemma3)
        r.fail(str("rope_parameters in the per-layer-type form (keys ", o.begin().key(),
                   ", …) is not read so by transformers for model_type '", type,
                   "' (it would run default RoPE): give one RoPE object {\"rope_type\", \"rope_theta\", …}"));
      if (given(o, "full_attention")) v5 = parse_rope_object(r, o["full_attention"], "rope_parameters.full_attention", type);
      if (given(o, "sliding_attention"))
        local = parse_rope_object(r, o["sliding_attention"], "rope_parameters.sliding_attention", type);
      if (local.theta && local_theta && *local.theta != *local_theta)
        r.fail(str("rope_local_base_freq ", *local_theta, " and rope_parameters.sliding_attention.rope_theta ",
                   *local.theta, " disagree"));
    } else {
      if (gemma3) r.fail("rope_parameters for gemma3_text must be the per-layer-type form {\"full_attention\": {…}, "
                         "\"sliding_attention\": {…}}");
      v5 = parse_rope_object(r, o, "rope_parameters", type);
    }
    if (classic.theta && v5.theta && *classic.theta != *v5.theta)
      r.fail(str("rope_theta ", *classic.theta, " and rope_parameters.rope_theta ", *v5.theta, " disagree"));
    if (given(r.j, "rope_scaling") && !same_scaling(classic.scaling, v5.scaling))
      r.fail(str("rope_scaling (", describe(classic.scaling), ") and rope_parameters (", describe(v5.scaling),
                 ") disagree"));
    if (partial && v5.partial_rotary_factor && *partial != *v5.partial_rotary_factor)
      r.fail(str("partial_rotary_factor ", *partial, " and rope_parameters.partial_rotary_factor ",
                 *v5.partial_rotary_factor, " disagree"));
    spec.scaling = v5.scaling;
    if (v5.theta) spec.theta = v5.theta;
    if (v5.partial_rotary_factor) partial = v5.partial_rotary_factor;
  }
  // partial_rotary_factor: transformers' Phi-3 rotates that fraction of each head; the other
  // families' rotary code rotates whole heads (a fraction would break or be ignored there).
  c.partial_rotary_factor = partial.value_or(1.0);
  if (c.partial_rotary_factor != 1.0 && type != "phi3")
    r.fail(str(given(r.j, "partial_rotary_factor") ? "" : "rope_parameters.", "partial_rotary_factor ",
               c.partial_rotary_factor, " is not supported for model_type '", type,
               "' (transformers rotates the whole head there; phi3 reads it)"));
  if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1))
    r.fail(str("partial_rotary_factor ", c.partial_rotary_factor, " must be in (0, 1]"));
  if (c.rotary_dim() % 2 != 0 || c.rotary_dim() == 0)
    r.fail(str("head dim ", c.head_dim(), " × partial_rotary_factor ", c.partial_rotary_factor, " = ", c.rotary_dim(),
               " rotary dims must be even for RoPE"));
  c.rope_theta = spec.theta.value_or(fam.rope_theta);
  c.rope = spec.scaling;
  complete(r, c.rope, c, given(r.j, "rope_parameters") ? "rope_parameters" : "rope_scaling");
  if (has_local) {
    Rope l;
    l.theta = local.theta.value_or(local_theta.value_or(10000.0));
    l.scaling = local.scaling;
    complete(r, l.scaling, c, "rope_parameters.sliding_attention");
    c.local_rope = l;
  }
}

// ---- layers: sliding windows and NoPE ------------------------------------------------------

std::vector<std::string> layer_types(const Reader& r, const ModelConfig& c) {
  std::vector<std::string> out;
  if (!given(r.j, "layer_types")) return out;
  const json& t = r.j["layer_types"];
  if (!t.is_array() || static_cast<int64_t>(t.size()) != c.layers)
    r.fail(str("'layer_types' must list one type per layer (", c.layers, "), got ", t.dump()));
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string type = t[i].is_string() ? t[i].get<std::string>() : t[i].dump();
    if (type != "sliding_attention" && type != "full_attention")
      r.fail(str("layer_types[", i, "] '", type, "' is not supported (full_attention, sliding_attention)"));
    out.push_back(type);
  }
  return out;
}

std::optional<int64_t> window_key(const Reader& r, const Family& fam) {
  if (!r.j.contains("sliding_window")) return fam.sliding_window;  // the config class's default
  if (r.j["sliding_window"].is_null()) return std::nullopt;
  return r.positive("sliding_window");
}

// Each layer's kind and the window, as each family's transformers code decides them.
void parse_layers(const Reader& r, ModelConfig& c, const Family& fam) {
  const std::string& type = c.model_type;
  c.layer_kinds.assign(static_cast<size_t>(c.layers), LayerKind{});
  const std::vector<std::string> types = layer_types(r, c);
  std::optional<int64_t> window = window_key(r, fam);
  std::vector<bool> sliding(static_cast<size_t>(c.layers), false);
  if (type == "llama" || type == "granite" || type == "olmo2" || type == "olmoe") {
    // No sliding window in transformers' code for these: a window set is not applied there.
    if (given(r.j, "sliding_window") || r.boolean("use_sliding_window", false))
      c.unapplied_window = given(r.j, "sliding_window") ? std::optional<int64_t>(r.positive("sliding_window"))
                                                        : std::optional<int64_t>(4096);
    for (const auto& t : types)
      if (t == "sliding_attention") {
        if (!given(r.j, "sliding_window")) r.fail("layers use sliding_attention, but 'sliding_window' is not set");
        c.unapplied_window = r.positive("sliding_window");
      }
    window.reset();
  } else if (type == "mistral" || type == "phi3" || type == "mixtral") {
    // Every layer attends within the window when one is set (Mistral's default: 4096).
    for (size_t i = 0; i < sliding.size(); ++i) sliding[i] = window.has_value();
  } else if (type == "qwen3_moe") {
    // Qwen3-MoE: every layer slides when use_sliding_window (its config class has no
    // layer_types nor max_window_layers; the model masks all layers alike).
    if (!r.boolean("use_sliding_window", false)) window.reset();
    for (size_t i = 0; i < sliding.size(); ++i) sliding[i] = window.has_value();
  } else if (type == "qwen2" || type == "qwen3" || type == "smollm3") {
    if (!r.boolean("use_sliding_window", false)) window.reset();
    if (!types.empty()) {
      for (size_t i = 0; i < sliding.size(); ++i) sliding[i] = types[i] == "sliding_attention" && window;
    } else if (type == "smollm3") {
      // SmolLM3: the NoPE layers slide when a window is used (set below with no_rope_layers).
    } else {
      int64_t full_layers = 28;  // transformers' Qwen2Config / Qwen3Config default
      if (given(r.j, "max_window_layers")) {
        const json& m = r.j["max_window_layers"];
        if (!m.is_number_integer() || m.get<int64_t>() < 0)
          r.fail(str("'max_window_layers' must be a non-negative integer, got ", m.dump()));
        full_layers = m.get<int64_t>();
      }
      for (int64_t i = 0; i < c.layers; ++i) sliding[static_cast<size_t>(i)] = window && i >= full_layers;
    }
  } else if (is_gemma(type)) {
    if (r.boolean("use_bidirectional_attention", false))
      r.fail("'use_bidirectional_attention' = true is not supported (linnet's attention is causal)");
    int64_t pattern = type == "gemma2" ? 2 : 6;  // Gemma 3: sliding_window_pattern, default 6
    if (type == "gemma3_text" && given(r.j, "sliding_window_pattern")) pattern = r.positive("sliding_window_pattern");
    for (int64_t i = 0; i < c.layers; ++i) {
      const bool s = types.empty() ? (i + 1) % pattern != 0 : types[static_cast<size_t>(i)] == "sliding_attention";
      sliding[static_cast<size_t>(i)] = s && window;
      if (type == "gemma3_text" && s) c.layer_kinds[static_cast<size_t>(i)].rope = 1;  // the local RoPE
    }
  }
  // SmolLM3: no_rope_layers[i] = 1 where layer i applies RoPE (default: every 4th has none).
  if (given(r.j, "no_rope_layers") || type == "smollm3") {
    if (type != "smollm3")
      r.fail(str("'no_rope_layers' = ", r.j["no_rope_layers"].dump(),
                 " is not supported for model_type '", type, "' (transformers reads it for smollm3)"));
    std::vector<int64_t> use(static_cast<size_t>(c.layers));
    if (given(r.j, "no_rope_layers")) {
      const json& n = r.j["no_rope_layers"];
      if (!n.is_array() || static_cast<int64_t>(n.size()) != c.layers)
        r.fail(str("'no_rope_layers' must list 1 (RoPE) or 0 (none) per layer (", c.layers, "), got ", n.dump()));
      for (size_t i = 0; i < n.size(); ++i) {
        if (!n[i].is_number_integer() || (n[i].get<int64_t>() != 0 && n[i].get<int64_t>() != 1))
          r.fail(str("no_rope_layers[", i, "] must be 0 or 1, got ", n[i].dump()));
        use[i] = n[i].get<int64_t>();
      }
    } else {
      const int64_t every = given(r.j, "no_rope_layer_interval") ? r.positive("no_rope_layer_interval") : 4;
      for (int64_t i = 0; i < c.layers; ++i) use[static_cast<size_t>(i)] = (i + 1) % every != 0;
    }
    for (int64_t i = 0; i < c.layers; ++i) {
      if (!use[static_cast<size_t>(i)]) c.layer_kinds[static_cast<size_t>(i)].rope = -1;
      if (types.empty()) sliding[static_cast<size_t>(i)] = window && !use[static_cast<size_t>(i)];
    }
  }
  for (int64_t i = 0; i < c.layers; ++i) c.layer_kinds[static_cast<size_t>(i)].sliding = sliding[static_cast<size_t>(i)];
  if (c.any_sliding()) c.sliding_window = window;
}

// ---- what linnet does not implement ------------------------------------------------------

// Keys whose presence (with a value other than the neutral one) changes the model's math.
void refuse_unsupported(const Reader& r, const std::string& type) {
  const json& j = r.j;
  auto refuse = [&](const char* key, const std::string& why) {
    r.fail(str("'", key, "' = ", j[key].dump(), " is not supported (", why, ")"));
  };
  if (type != "gemma2" && type != "gemma3_text")
    for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
      if (given(j, key)) refuse(key, "logit soft-capping is Gemma's (gemma2, gemma3_text)");
  if (given(j, "pretraining_tp") && !(j["pretraining_tp"].is_number_integer() && j["pretraining_tp"].get<int64_t>() <= 1))
    refuse("pretraining_tp", "transformers splits each projection into pretraining_tp slices; linnet runs 1");
  if (!is_moe(type))
    for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"})
      if (given(j, key) && !(j[key].is_number_integer() && j[key].get<int64_t>() == 0))
        refuse(key, str("mixture-of-experts layers are read for model_type mixtral, qwen3_moe and olmoe, not '", type,
                        "'"));
  if (type == "mixtral" && given(j, "n_routed_experts")) refuse("n_routed_experts", "DeepSeek's experts");
  if (given(j, "clip_qkv")) refuse("clip_qkv", "OLMo's clipping of q, k and v");
  for (const char* key : {"use_qk_norm", "qk_layernorm", "rope_interleaved"})
    if (given(j, key) && j[key] != false)
      refuse(key, "linnet's q/k norms are those of qwen3, gemma3_text and olmo2; RoPE rotates halves, not pairs");
  if (given(j, "query_pre_attn_scalar") && type != "gemma2" && type != "gemma3_text")
    refuse("query_pre_attn_scalar", "Gemma's attention scale (gemma2, gemma3_text); attention is scaled by 1/sqrt(head_dim)");
  if (type != "granite")
    for (const char* key : {"embedding_multiplier", "logits_scaling", "residual_multiplier", "attention_multiplier"})
      if (given(j, key) && !(j[key].is_number() && j[key].get<double>() == 1.0))
        refuse(key, "scaling multipliers are Granite's (model_type granite)");
  if (given(j, "quantization_config")) refuse("quantization_config", "quantized weights; linnet reads bf16, f16, f32");
}

// ---- mixtures of experts -------------------------------------------------------------------

// The experts as each family's config class has them: how many, how many a token takes, their
// inner size, whether the chosen weights are renormalised, and which layers have them.
void parse_moe(const Reader& r, ModelConfig& c) {
  const std::string& type = c.model_type;
  if (!is_moe(type)) return;
  const json& j = r.j;
  std::optional<int64_t> local, named;
  if (given(j, "num_local_experts")) local = r.positive("num_local_experts");
  if (given(j, "num_experts")) named = r.positive("num_experts");
  if (type == "mixtral") {
    // MixtralConfig has num_local_experts only; a num_experts beside it is not read.
    if (named && named != local)
      r.fail(str("'num_experts' = ", *named, " is not read by transformers' Mixtral (it reads num_local_experts",
                 local ? str(" = ", *local) : std::string(", default 8"), ")"));
    c.experts = local.value_or(8);
  } else {
    // Qwen3-MoE and OLMoE read num_experts and num_local_experts as one attribute.
    if (local && named && *local != *named)
      r.fail(str("num_experts ", *named, " and num_local_experts ", *local, " disagree"));
    c.experts = local ? *local : named.value_or(type == "qwen3_moe" ? 128 : 64);
  }
  constexpr int64_t kMaxExperts = 1024;  // a router row sorts in one device thread's memory
  if (c.experts > kMaxExperts)
    r.fail(str(c.experts, " experts per layer are more than linnet's router takes (", kMaxExperts, ")"));
  // Absent takes the family's default; null is not absent (transformers' top-k fails on it).
  if (j.contains("num_experts_per_tok") && j["num_experts_per_tok"].is_null())
    r.fail("'num_experts_per_tok' must be a positive integer, got null");
  c.experts_per_token = r.positive("num_experts_per_tok", type == "mixtral" ? 2 : 8);
  if (c.experts_per_token > c.experts)
    r.fail(str("num_experts_per_tok ", c.experts_per_token, " is more than the ", c.experts, " experts"));
  if (c.experts_per_token > 64)
    r.fail(str("num_experts_per_tok ", c.experts_per_token, " is more than linnet's router takes (64)"));
  c.expert_inner = type == "qwen3_moe" ? r.positive("moe_intermediate_size", 768) : c.inner;
  // Mixtral always renormalises its top-k weights (its router has no switch for it).
  c.norm_topk_prob = type == "mixtral" ? true : r.boolean("norm_topk_prob", false);
  c.expert_names = type == "mixtral" ? ModelConfig::ExpertNames::mixtral : ModelConfig::ExpertNames::qwen;
  std::vector<bool> sparse(static_cast<size_t>(c.layers), true);
  if (type == "qwen3_moe") {
    // transformers: layer i has experts unless it is in mlp_only_layers, when
    // (i + 1) % decoder_sparse_step == 0; the others keep an MLP of intermediate_size.
    const int64_t step = r.positive("decoder_sparse_step", 1);
    for (int64_t i = 0; i < c.layers; ++i) sparse[static_cast<size_t>(i)] = (i + 1) % step == 0;
    if (given(j, "mlp_only_layers")) {
      const json& m = j["mlp_only_layers"];
      if (!m.is_array()) r.fail(str("'mlp_only_layers' must be a list of layer indices, got ", m.dump()));
      for (const json& v : m) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.layers)
          r.fail(str("'mlp_only_layers' must list layers in [0, ", c.layers, "), got ", m.dump()));
        sparse[static_cast<size_t>(v.get<int64_t>())] = false;
      }
    }
  } else {
    for (const char* key : {"decoder_sparse_step", "mlp_only_layers", "moe_intermediate_size"})
      if (given(j, key)) r.fail(str("'", key, "' = ", j[key].dump(), " is not read for model_type '", type,
                                    "' (transformers reads it for qwen3_moe)"));
  }
  bool any = false;
  for (int64_t i = 0; i < c.layers; ++i) {
    c.layer_kinds[static_cast<size_t>(i)].sparse = sparse[static_cast<size_t>(i)];
    any = any || sparse[static_cast<size_t>(i)];
  }
  if (!any) c.experts = c.experts_per_token = c.expert_inner = 0;  // every layer dense: no experts at all
}

}  // namespace

ModelConfig parse_hf_config(const json& j, const std::string& source) {
  if (!j.is_object()) throw Error(str(source, ": config must be a JSON object"));
  Reader r{j, source};
  ModelConfig c;
  c.model_type = r.string("model_type", "llama");
  const Family* fam = nullptr;
  for (const auto& f : families())
    if (c.model_type == f.model_type) fam = &f;
  if (!fam) {
    const std::string& t = c.model_type;
    if (t == "gemma3")
      r.fail("unsupported model_type 'gemma3' (Gemma 3 with its vision tower, Gemma3ForConditionalGeneration): linnet "
             "runs the text model, model_type gemma3_text (Gemma3ForCausalLM)");
    if (t.find("moe") != std::string::npos || t == "deepseek_v2" || t == "deepseek_v3" || t == "gpt_oss")
      r.fail(str("unsupported model_type '", t, "' (its mixture-of-experts layers are not implemented: linnet's are "
                 "mixtral, qwen3_moe and olmoe; supported: ", family_list(), ")"));
    r.fail(str("unsupported model_type '", t, "' (supported: ", family_list(), ")"));
  }
  const std::string& type = c.model_type;
  if (given(j, "architectures")) {
    if (!j["architectures"].is_array()) r.fail(str("'architectures' must be a list, got ", j["architectures"].dump()));
    for (const json& a : j["architectures"])
      if (a != fam->architecture)
        r.fail(str("unsupported architectures entry ", a.dump(), " for model_type '", type, "' (supported: ",
                   fam->architecture, ")"));
  }
  c.vocab = r.positive("vocab_size");
  c.hidden = r.positive("hidden_size");
  c.heads = r.positive("num_attention_heads");
  c.kv_heads = r.positive("num_key_value_heads", c.heads);
  c.inner = r.positive("intermediate_size");
  c.layers = r.positive("num_hidden_layers");
  c.max_position = r.positive("max_position_embeddings", 2048);
  if (c.heads % c.kv_heads != 0)
    r.fail(str("num_attention_heads ", c.heads, " does not divide by num_key_value_heads ", c.kv_heads));
  // head_dim: the config's, else the family's default (Qwen 3: 128, Gemma: 256), else H / Heads.
  int64_t head_dim = fam->head_dim;
  if (given(j, "head_dim")) head_dim = r.positive("head_dim");
  if (head_dim == 0) {
    if (c.hidden % c.heads != 0)
      r.fail(str("hidden_size ", c.hidden, " does not divide by num_attention_heads ", c.heads,
                 " and no head_dim is given"));
    head_dim = c.hidden / c.heads;
  }
  c.head_size = c.hidden % c.heads == 0 && head_dim == c.hidden / c.heads ? 0 : head_dim;
  // Activation: Gemma reads hidden_activation (its hidden_act, when present, is not used).
  if (is_gemma(type)) {
    const std::string act = r.string("hidden_activation", "gelu_pytorch_tanh");
    if (act != "gelu_pytorch_tanh")
      r.fail(str("unsupported hidden_activation '", act, "' (supported: gelu_pytorch_tanh)"));
    c.activation = ModelConfig::Activation::gelu_tanh;
  } else {
    for (const char* key : {"hidden_act", "hidden_activation"}) {
      const std::string act = r.string(key, "silu");
      if (act != "silu" && act != "swish") r.fail(str("unsupported ", key, " '", act, "' (supported: silu)"));
    }
  }
  c.rms_norm_eps = r.number("rms_norm_eps", fam->rms_norm_eps);
  if (!(c.rms_norm_eps > 0)) r.fail("'rms_norm_eps' must be positive");
  parse_rope(r, c, *fam);
  refuse_unsupported(r, type);
  parse_layers(r, c, *fam);
  parse_moe(r, c);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", fam->tie_word_embeddings);
  // Biases, as each family's modules have them.
  const bool attention_bias = r.boolean("attention_bias", false);
  if (type == "qwen2") {
    c.qkv_bias = true;
  } else if (type == "mistral" || type == "phi3" || type == "mixtral") {
    c.qkv_bias = c.o_bias = false;  // hard-wired off in transformers' modules
  } else {
    c.qkv_bias = c.o_bias = attention_bias;
  }
  c.mlp_bias = (type == "llama" || type == "granite" || type == "smollm3") && r.boolean("mlp_bias", false);
  if (type != "llama" && type != "granite" && type != "smollm3" && r.boolean("mlp_bias", false))
    r.fail(str("'mlp_bias' = true is not supported for model_type '", type, "' (its MLP has no biases in transformers)"));
  // The families' own switches.
  if (type == "qwen3" || type == "qwen3_moe") c.qk_norm = ModelConfig::QkNorm::per_head;
  if (type == "olmoe") {
    // OLMoE's q_norm / k_norm span the whole projection, sized hidden_size and
    // hidden_size / heads · kv_heads: a head_dim of another size would not fit them.
    c.qk_norm = ModelConfig::QkNorm::whole;
    if (c.head_dim() * c.heads != c.hidden)
      r.fail(str("head_dim ", c.head_dim(), " × num_attention_heads ", c.heads, " ≠ hidden_size ", c.hidden,
                 ": OLMoE's q/k norms are sized by hidden_size"));
  }
  if (type == "olmo2") {
    c.qk_norm = ModelConfig::QkNorm::whole;
    c.pre_norms = false;
    c.post_norms = true;
  }
  if (type == "phi3") c.fused_qkv = c.fused_gate_up = true;
  // Phi3ForCausalLM.prepare_inputs_for_generation drops the cache when a sequence reaches
  // original_max_position_embeddings + 1 tokens with no more cached: every key is recomputed
  // with the long factors. Only longrope changes the keys by it.
  if (type == "phi3" && c.rope.type == RopeScaling::Type::longrope) c.recompute_cache_at = c.rope.original_max_position;
  if (is_gemma(type)) {
    c.norm_plus_one = true;
    c.post_norms = true;
    if (type == "gemma3_text") c.qk_norm = ModelConfig::QkNorm::per_head;
    // transformers: torch.tensor(hidden_size ** 0.5), a float32 scalar.
    c.embedding_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden)));
    const double qpas = r.number("query_pre_attn_scalar", 256);
    if (!(qpas > 0)) r.fail("'query_pre_attn_scalar' must be positive");
    c.attention_scale = 1.0 / std::sqrt(qpas);
    auto cap = [&](const char* key, double fallback) {
      if (j.contains(key) && j[key].is_null()) return 0.0;
      if (!given(j, key)) return fallback;
      const double v = r.number(key, fallback);
      // 0 is not "off": transformers divides by the cap (all-zero logits, uniform attention).
      if (!(v > 0))
        r.fail(str("'", key, "' must be positive or null (null turns soft-capping off; transformers divides by it), got ",
                   j[key].dump()));
      return v;
    };
    // Gemma 2 defaults to 50 / 30; transformers' Gemma 3 applies only the final cap.
    if (type == "gemma2") c.attn_softcap = cap("attn_logit_softcapping", 50.0);
    c.final_softcap = cap("final_logit_softcapping", type == "gemma2" ? 30.0 : 0.0);
  }
  if (type == "granite") {
    auto positive_number = [&](const char* key) {
      const double v = r.number(key, 1.0);
      if (!(v > 0)) r.fail(str("'", key, "' must be positive"));
      return v;
    };
    // Multiplied into float32 tensors: the f32 value is what counts.
    c.embedding_scale = static_cast<float>(positive_number("embedding_multiplier"));
    c.residual_multiplier = static_cast<float>(positive_number("residual_multiplier"));
    c.attention_scale = static_cast<float>(positive_number("attention_multiplier"));
    c.logits_scaling = static_cast<float>(positive_number("logits_scaling"));
  }
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

namespace {

json rope_json(const RopeScaling& s) {
  switch (s.type) {
    case RopeScaling::Type::none: return nullptr;
    case RopeScaling::Type::linear: return {{"rope_type", "linear"}, {"factor", s.factor}};
    case RopeScaling::Type::dynamic: return {{"rope_type", "dynamic"}, {"factor", s.factor}};
    case RopeScaling::Type::llama3:
      return {{"rope_type", "llama3"},
              {"factor", s.factor},
              {"low_freq_factor", s.low_freq_factor},
              {"high_freq_factor", s.high_freq_factor},
              {"original_max_position_embeddings", s.original_max_position}};
    case RopeScaling::Type::yarn: {
      json o = {{"rope_type", "yarn"},
                {"factor", s.factor},
                {"original_max_position_embeddings", s.original_max_position},
                {"beta_fast", s.beta_fast},
                {"beta_slow", s.beta_slow},
                {"truncate", s.truncate}};
      if (s.attention_factor) o["attention_factor"] = *s.attention_factor;
      if (s.mscale) o["mscale"] = *s.mscale;
      if (s.mscale_all_dim) o["mscale_all_dim"] = *s.mscale_all_dim;
      return o;
    }
    case RopeScaling::Type::longrope: {
      json o = {{"rope_type", "longrope"},
                {"factor", s.factor},
                {"original_max_position_embeddings", s.original_max_position},
                {"short_factor", s.short_factor},
                {"long_factor", s.long_factor}};
      if (s.attention_factor) o["attention_factor"] = *s.attention_factor;
      return o;
    }
  }
  return nullptr;
}

}  // namespace

json to_hf_config(const ModelConfig& c) {
  const std::string& type = c.model_type;
  const Family* fam = &families()[0];
  for (const auto& f : families())
    if (type == f.model_type) fam = &f;
  json j = {
      {"architectures", {fam->architecture}},
      {"model_type", type},
      {"hidden_size", c.hidden},
      {"intermediate_size", c.inner},
      {"num_hidden_layers", c.layers},
      {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads},
      {"head_dim", c.head_dim()},
      {"vocab_size", c.vocab},
      {"max_position_embeddings", c.max_position},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"torch_dtype", c.dtype == DType::bf16 ? "bfloat16" : c.dtype == DType::f16 ? "float16" : "float32"},
  };
  if (is_gemma(type)) j["hidden_activation"] = "gelu_pytorch_tanh";
  else j["hidden_act"] = "silu";
  if (type != "qwen2" && type != "mistral" && type != "phi3" && type != "mixtral") j["attention_bias"] = c.o_bias;
  if (type == "llama" || type == "granite" || type == "smollm3") j["mlp_bias"] = c.mlp_bias;
  j["rope_scaling"] = rope_json(c.rope);
  if (c.partial_rotary_factor != 1.0) j["partial_rotary_factor"] = c.partial_rotary_factor;
  if (c.local_rope) {
    j["rope_local_base_freq"] = c.local_rope->theta;
    if (c.local_rope->scaling.type != RopeScaling::Type::none) {
      // Only the per-layer-type form can carry a scaled local RoPE.
      j.erase("rope_scaling");
      j.erase("rope_theta");
      j.erase("rope_local_base_freq");
      json full = c.rope.type == RopeScaling::Type::none ? json{{"rope_type", "default"}} : rope_json(c.rope);
      full["rope_theta"] = c.rope_theta;
      json local = rope_json(c.local_rope->scaling);
      local["rope_theta"] = c.local_rope->theta;
      j["rope_parameters"] = {{"full_attention", full}, {"sliding_attention", local}};
    }
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  // Layers: the window and each layer's type; NoPE layers.
  if (!c.layer_kinds.empty() && type != "llama" && type != "granite" && type != "olmo2" && type != "olmoe") {
    json types = json::array();
    for (int64_t i = 0; i < c.layers; ++i) types.push_back(c.layer_kind(i).sliding ? "sliding_attention" : "full_attention");
    if (type != "mistral" && type != "phi3" && !is_moe(type)) j["layer_types"] = types;
  }
  j["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
  if (type == "qwen2" || type == "qwen3" || type == "smollm3" || type == "qwen3_moe")
    j["use_sliding_window"] = c.sliding_window.has_value();
  if (c.moe()) {
    j[type == "mixtral" ? "num_local_experts" : "num_experts"] = c.experts;
    j["num_experts_per_tok"] = c.experts_per_token;
    if (type != "mixtral") j["norm_topk_prob"] = c.norm_topk_prob;
    if (type == "qwen3_moe") {
      j["moe_intermediate_size"] = c.expert_inner;
      j["decoder_sparse_step"] = 1;
      json dense = json::array();
      for (int64_t i = 0; i < c.layers; ++i)
        if (!c.sparse_layer(i)) dense.push_back(i);
      j["mlp_only_layers"] = dense;
    }
  }
  if (c.unapplied_window) {
    j["sliding_window"] = *c.unapplied_window;
    j["use_sliding_window"] = true;
  }
  if (type == "smollm3") {
    json nope = json::array();
    for (int64_t i = 0; i < c.layers; ++i) nope.push_back(c.layer_kind(i).rope < 0 ? 0 : 1);
    j["no_rope_layers"] = nope;
  }
  if (is_gemma(type)) {
    const double s = c.attention_scale.value_or(1.0 / std::sqrt(256.0));
    j["query_pre_attn_scalar"] = std::round(1.0 / (s * s));
    j["final_logit_softcapping"] = c.final_softcap > 0 ? json(c.final_softcap) : json(nullptr);
    j["attn_logit_softcapping"] = c.attn_softcap > 0 ? json(c.attn_softcap) : json(nullptr);
    if (type == "gemma3_text") j.erase("attn_logit_softcapping");
  }
  if (type == "granite") {
    j["embedding_multiplier"] = c.embedding_scale;
    j["residual_multiplier"] = c.residual_multiplier;
    j["attention_multiplier"] = c.attention_scale.value_or(1.0 / std::sqrt(static_cast<double>(c.head_dim())));
    j["logits_scaling"] = c.logits_scaling;
  }
  return j;
}

}  // namespace linnet
