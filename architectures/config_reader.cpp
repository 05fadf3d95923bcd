// Typed reads of config.json's keys, and the RoPE objects transformers writes (classic
// rope_scaling and transformers 5's rope_parameters), shared by every architecture.
#include "architectures/config_reader.h"

#include <cmath>

#include "core/error.h"

namespace linnet {

using nlohmann::json;

namespace {
constexpr int64_t kMaxSize = (int64_t{1} << 31) - 1;
}  // namespace

void ConfigReader::fail(const std::string& msg) const { throw Error(str(source, ": ", msg)); }

int64_t ConfigReader::positive(const char* key, std::optional<int64_t> fallback) const {
  if (!given(j, key)) {
    if (fallback) return *fallback;
    fail(str("missing required key '", key, "'"));
  }
  const json& v = j[key];
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > kMaxSize)
    fail(str("'", key, "' must be a positive integer below 2^31, got ", v.dump()));
  return v.get<int64_t>();
}

double ConfigReader::number(const char* key, double fallback) const {
  if (!given(j, key)) return fallback;
  if (!j[key].is_number()) fail(str("'", key, "' must be a number, got ", j[key].dump()));
  const double v = j[key].get<double>();
  if (!std::isfinite(v)) fail(str("'", key, "' must be finite, got ", j[key].dump()));
  return v;
}

bool ConfigReader::boolean(const char* key, bool fallback) const {
  if (!given(j, key)) return fallback;
  if (!j[key].is_boolean()) fail(str("'", key, "' must be true or false, got ", j[key].dump()));
  return j[key].get<bool>();
}

std::string ConfigReader::string(const char* key, const std::string& fallback) const {
  if (!given(j, key)) return fallback;
  if (!j[key].is_string()) fail(str("'", key, "' must be a string, got ", j[key].dump()));
  return j[key].get<std::string>();
}

// Each id must be a token of the vocabulary: a larger one would wrap where ids are 32-bit,
// and could never be generated anyway.
std::vector<int64_t> ConfigReader::token_ids(const char* key, int64_t vocab) const {
  if (!given(j, key)) return {};
  const json& v = j[key];
  std::vector<int64_t> out;
  for (const json& e : v.is_array() ? v : json::array({v})) {
    if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > INT64_MAX) || e.get<int64_t>() < 0)
      fail(str("'", key, "' must be a token id or a list of them, got ", v.dump()));
    if (e.get<int64_t>() >= vocab) fail(str("'", key, "' = ", e.dump(), " is not a token id: vocab_size is ", vocab));
    out.push_back(e.get<int64_t>());
  }
  return out;
}

namespace {

std::vector<double> number_list(const ConfigReader& r, const json& o, const char* key, const std::string& where) {
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

}  // namespace

RopeSpec parse_rope_object(const ConfigReader& r, const json& o, const std::string& key,
                           bool longrope_aliases) {
  if (!o.is_object()) r.fail(str("'", key, "' must be an object or null, got ", o.dump()));
  ConfigReader sub{o, r.source};
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
  if (longrope_aliases && (type == "su" || type == "yarn")) type = "longrope";
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

std::vector<std::string> layer_types(const ConfigReader& r, const ModelConfig& c, bool linear) {
  std::vector<std::string> out;
  if (!given(r.j, "layer_types")) return out;
  const json& t = r.j["layer_types"];
  if (!t.is_array() || static_cast<int64_t>(t.size()) != c.layers)
    r.fail(str("'layer_types' must list one type per layer (", c.layers, "), got ", t.dump()));
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string type = t[i].is_string() ? t[i].get<std::string>() : t[i].dump();
    if (type != "full_attention" && type != (linear ? "linear_attention" : "sliding_attention"))
      r.fail(str("layer_types[", i, "] '", type, "' is not supported (",
                 linear ? "full_attention, linear_attention" : "full_attention, sliding_attention", ")"));
    out.push_back(type);
  }
  return out;
}

std::optional<int64_t> window_key(const ConfigReader& r, std::optional<int64_t> fallback) {
  if (!r.j.contains("sliding_window")) return fallback;  // the config class's default
  if (r.j["sliding_window"].is_null()) return std::nullopt;
  return r.positive("sliding_window");
}

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

}  // namespace linnet
