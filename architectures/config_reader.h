// What every architecture's config.json parsing shares: typed reads of its keys with errors
// prefixed by the file's path, and the RoPE spellings transformers has written.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "layers/model_config.h"

namespace linnet {

inline bool given(const nlohmann::json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// Reads keys of one JSON object; `source` (a path) prefixes every error message.
struct ConfigReader {
  const nlohmann::json& j;
  const std::string& source;

  [[noreturn]] void fail(const std::string& msg) const;
  // A size below 2³¹ (products of two fit in 64 bits); absent: `fallback`, else an error.
  int64_t positive(const char* key, std::optional<int64_t> fallback = std::nullopt) const;
  double number(const char* key, double fallback) const;
  bool boolean(const char* key, bool fallback) const;
  std::string string(const char* key, const std::string& fallback) const;
  // An id, or a list of ids, each below `vocab` (eos_token_id of Llama 3 Instruct: a list).
  std::vector<int64_t> token_ids(const char* key, int64_t vocab) const;
};

// One RoPE description: from `rope_scaling` (+ top-level rope_theta) or `rope_parameters`.
struct RopeSpec {
  std::optional<double> theta;
  std::optional<double> partial_rotary_factor;
  RopeScaling scaling;
};

// An object with rope_type (or the older "type") and its parameters; `key` names it in errors
// ("rope_scaling", "rope_parameters.full_attention"). `longrope_aliases`: "su" and "yarn" read
// as longrope (transformers' Phi-3).
RopeSpec parse_rope_object(const ConfigReader& r, const nlohmann::json& o, const std::string& key,
                           bool longrope_aliases);
// config.json's rope_scaling / rope_parameters for a RoPE as written back.
nlohmann::json rope_json(const RopeScaling& s);

// transformers' layer_types: one "full_attention" / "sliding_attention" per layer (`linear`:
// "full_attention" / "linear_attention", the hybrid models') (empty: absent).
std::vector<std::string> layer_types(const ConfigReader& r, const ModelConfig& c, bool linear = false);
// `sliding_window`: absent takes `fallback` (the config class's default), null none.
std::optional<int64_t> window_key(const ConfigReader& r, std::optional<int64_t> fallback);

// config.json's quantization_config (architectures/quantization_config.cpp): none when absent;
// an error naming the key for a method or setting linnet does not read.
std::optional<Quantization> parse_quantization_config(const ConfigReader& r, const ModelConfig& c);

}  // namespace linnet
