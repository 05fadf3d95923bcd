// config.json's quantization_config → Quantization (layers/quantization.h). Read: Hugging
// Face's fine-grained FP8 (quant_method "fp8": DeepSeek-V3/R1, Qwen3-*-FP8) and
// compressed-tensors' float-quantized FP8, pack-quantized W4A16, int-quantized W8A8 and
// mxfp4-pack-quantized MXFP4A16 (llm-compressor's checkpoints), 4-bit GPTQ and AWQ. Every other method is refused by name, as is any key that
// would change the numbers.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "architectures/config_reader.h"
#include "core/error.h"

namespace linnet {

using nlohmann::json;

namespace {

std::vector<std::string> string_list(const ConfigReader& r, const json& q, const char* key) {
  std::vector<std::string> out;
  if (!given(q, key)) return out;
  if (!q[key].is_array()) r.fail(str("quantization_config.", key, " must be a list of module names, got ", q[key].dump()));
  for (const json& v : q[key]) {
    if (!v.is_string()) r.fail(str("quantization_config.", key, " holds ", v.dump(), ", not a module name"));
    out.push_back(v.get<std::string>());
  }
  return out;
}

Quantization fine_grained_fp8(const ConfigReader& r, const json& q) {
  int64_t block[2] = {128, 128};  // FineGrainedFP8Config's default
  if (q.contains("weight_block_size")) {
    const json& b = q["weight_block_size"];
    if (b.is_null())
      r.fail("quantization_config.weight_block_size is null: FP8 with one scale per tensor is not read (linnet reads "
             "block scales, weight_block_size [rows, cols])");
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() || b[0].get<int64_t>() <= 0 ||
        b[1].get<int64_t>() <= 0 || b[0].get<int64_t>() > (int64_t{1} << 20) || b[1].get<int64_t>() > (int64_t{1} << 20))
      r.fail(str("quantization_config.weight_block_size must be [rows, cols] of positive integers, got ", b.dump()));
    block[0] = b[0].get<int64_t>();
    block[1] = b[1].get<int64_t>();
  }
  const std::string scheme = given(q, "activation_scheme") && q["activation_scheme"].is_string()
                                 ? q["activation_scheme"].get<std::string>()
                                 : given(q, "activation_scheme") ? q["activation_scheme"].dump() : "dynamic";
  if (scheme != "dynamic")
    r.fail(str("quantization_config.activation_scheme '", scheme,
               "' is not supported (linnet reads 'dynamic': activations are not stored quantized)"));
  for (const char* key : {"scale_fmt"})
    if (given(q, key) && !(q[key] == "float" || q[key] == "ue8m0"))
      r.fail(str("quantization_config.", key, " ", q[key].dump(), " is not supported (float, ue8m0)"));
  if (given(q, "modules_to_convert"))
    r.fail("quantization_config.modules_to_convert is not supported (linnet converts every linear layer but "
           "modules_to_not_convert, as transformers does without it)");
  if (given(q, "expert_dtype") && q["expert_dtype"] != "fp8")
    r.fail(str("quantization_config.expert_dtype ", q["expert_dtype"].dump(), " is not supported (fp8)"));
  Quantization out;
  out.method = "fp8";
  out.matrices = WeightLayout::fp8_blocks(block[0], block[1]);
  out.not_converted = string_list(r, q, "modules_to_not_convert");
  return out;
}

// A compressed-tensors quantization args object ("weights", "input_activations"): its key
// `key` is `want`, else an error naming group, object and key.
void expect_arg(const ConfigReader& r, const json& a, const std::string& where, const char* key, const json& want,
                const char* scheme = "compressed-tensors FP8: float-quantized weights, dynamic activations") {
  const json got = a.contains(key) ? a[key] : json();
  if (got != want)
    r.fail(str("quantization_config.", where, ".", key, " is ", got.dump().substr(0, 40), "; linnet reads ", want.dump(),
               " (", scheme, ")"));
}

// compressed-tensors' pack-quantized weights (W4A16: llm-compressor's GPTQ/RTN 4-bit; W8A16):
// 4-bit integers, a scale per group of columns (or per channel), symmetric or with zero points;
// or 8-bit integers four to a word, symmetric.
WeightLayout pack_quantized_weights(const ConfigReader& r, const json& w, const std::string& wn) {
  const char* scheme = "pack-quantized: 4- or 8-bit integer weights, static, groups or channels";
  const json bits = w.value("num_bits", json());
  if (bits != 4 && bits != 8)
    r.fail(str("quantization_config.", wn, ".num_bits is ", bits.dump().substr(0, 20), "; linnet reads 4 or 8 (", scheme,
               ")"));
  expect_arg(r, w, wn, "type", "int", scheme);
  expect_arg(r, w, wn, "dynamic", false, scheme);
  if (!w.contains("symmetric") || !w["symmetric"].is_boolean())
    r.fail(str("quantization_config.", wn, ".symmetric must be true or false"));
  if (bits == 8 && !w["symmetric"].get<bool>())
    r.fail(str("quantization_config.", wn, ".symmetric is false: asymmetric 8-bit pack-quantized weights (zero points) "
               "are not read yet (linnet reads symmetric W8A16)"));
  // actorder "weight" (alias "static") only ordered the calibration: the groups stay in order.
  // "group" (alias "dynamic") saves a weight_g_idx naming each column's group (4 bits here).
  const bool reordered = given(w, "actorder") && (w["actorder"] == "group" || w["actorder"] == "dynamic");
  if (given(w, "actorder") && !reordered && w["actorder"] != "weight" && w["actorder"] != "static")
    r.fail(str("quantization_config.", wn, ".actorder ", w["actorder"].dump().substr(0, 40),
               " is not a compressed-tensors activation ordering (null, \"weight\", \"static\", \"group\", \"dynamic\")"));
  if (reordered && bits == 8)
    r.fail(str("quantization_config.", wn, ".actorder ", w["actorder"].dump().substr(0, 40),
               " with 8-bit pack-quantized weights is not read yet (its weight_g_idx reorders the groups; linnet reads "
               "it with 4-bit ones)"));
  const std::string strategy = w.value("strategy", json("")).is_string() ? w.value("strategy", std::string()) : "";
  if (reordered && strategy != "group")
    r.fail(str("quantization_config.", wn, ".actorder ", w["actorder"].dump().substr(0, 40),
               " needs strategy \"group\" (its weight_g_idx names each column's group)"));
  int64_t group = WeightLayout::kWhole;
  if (strategy == "group") {
    const json& gs = w.value("group_size", json());
    if (!gs.is_number_integer() || gs.get<int64_t>() <= 0 || gs.get<int64_t>() % 8 != 0 ||
        gs.get<int64_t>() > (int64_t{1} << 20))
      r.fail(str("quantization_config.", wn, ".group_size must be a positive multiple of 8, got ", gs.dump()));
    group = gs.get<int64_t>();
  } else if (strategy != "channel") {
    r.fail(str("quantization_config.", wn, ".strategy '", strategy.substr(0, 40),
               "' is not supported with pack-quantized weights (linnet reads group and channel)"));
  }
  if (bits == 8) return WeightLayout::int8_packed_groups(group);
  return WeightLayout::int4_groups(group, w["symmetric"].get<bool>(), reordered);
}

// compressed-tensors' int-quantized weights (W8A8: llm-compressor's W8A8 and its SmoothQuant/GPTQ
// int8 outputs): 8-bit integers one a byte, symmetric, a scale per channel or group of columns.
WeightLayout int_quantized_weights(const ConfigReader& r, const json& w, const std::string& wn) {
  const char* scheme = "int-quantized: 8-bit integer weights, symmetric, static, channels or groups";
  expect_arg(r, w, wn, "num_bits", 8, scheme);
  expect_arg(r, w, wn, "type", "int", scheme);
  expect_arg(r, w, wn, "symmetric", true, scheme);
  expect_arg(r, w, wn, "dynamic", false, scheme);
  if (given(w, "actorder") && w["actorder"] != "static" && w["actorder"] != "weight")
    r.fail(str("quantization_config.", wn, ".actorder ", w["actorder"].dump().substr(0, 40),
               " is not supported yet (its weight_g_idx reorders the groups; linnet reads null, \"weight\" and "
               "\"static\" with int-quantized weights)"));
  const std::string strategy = w.value("strategy", json("")).is_string() ? w.value("strategy", std::string()) : "";
  if (strategy == "channel") return WeightLayout::int8_groups(WeightLayout::kWhole);
  if (strategy == "group") {
    const json& gs = w.value("group_size", json());
    if (!gs.is_number_integer() || gs.get<int64_t>() <= 0 || gs.get<int64_t>() > (int64_t{1} << 20))
      r.fail(str("quantization_config.", wn, ".group_size must be a positive integer, got ", gs.dump()));
    return WeightLayout::int8_groups(gs.get<int64_t>());
  }
  r.fail(str("quantization_config.", wn, ".strategy '", strategy.substr(0, 40),
             "' is not supported with int-quantized weights (linnet reads channel and group)"));
}

// compressed-tensors' mxfp4-pack-quantized weights (its MXFP4A16 scheme): E2M1 values, E8M0
// scales per block of 32 columns, symmetric, static.
WeightLayout mxfp4_weights(const ConfigReader& r, const json& w, const std::string& wn) {
  const char* scheme = "mxfp4-pack-quantized: E2M1 weights, E8M0 scales per group of 32, symmetric, static";
  expect_arg(r, w, wn, "num_bits", 4, scheme);
  expect_arg(r, w, wn, "type", "float", scheme);
  expect_arg(r, w, wn, "symmetric", true, scheme);
  expect_arg(r, w, wn, "dynamic", false, scheme);
  expect_arg(r, w, wn, "strategy", "group", scheme);
  expect_arg(r, w, wn, "group_size", 32, scheme);
  if (given(w, "scale_dtype")) expect_arg(r, w, wn, "scale_dtype", "torch.uint8", scheme);
  return WeightLayout::mxfp4_blocks();
}

// compressed-tensors' static input_activations (its FP8 scheme; int8 in static W8A8): `type`
// (float: FP8, int: int8), symmetric, one scale per tensor stored beside each layer
// ("…input_scale"), calibrated ahead.
ActivationRounding static_activations(const ConfigReader& r, const json& a, const std::string& an, const char* type) {
  const char* scheme = "compressed-tensors: static activations, symmetric, one input_scale per layer";
  expect_arg(r, a, an, "num_bits", 8, scheme);
  expect_arg(r, a, an, "type", type, scheme);
  expect_arg(r, a, an, "symmetric", true, scheme);
  expect_arg(r, a, an, "strategy", "tensor", scheme);
  ActivationRounding out{std::string(type) == "float" ? ActivationFormat::fp8 : ActivationFormat::int8, 0};
  out.stored = true;
  return out;
}

// compressed-tensors' dynamic input_activations: rounded to `type` (float: FP8, int: int8) per
// token or per group of columns, symmetric.
ActivationRounding dynamic_activations(const ConfigReader& r, const json& a, const std::string& an, const char* type,
                                       const char* scheme) {
  expect_arg(r, a, an, "num_bits", 8, scheme);
  expect_arg(r, a, an, "type", type, scheme);
  expect_arg(r, a, an, "symmetric", true, scheme);
  expect_arg(r, a, an, "dynamic", true, scheme);
  const ActivationFormat f = std::string(type) == "float" ? ActivationFormat::fp8 : ActivationFormat::int8;
  const std::string as = a.value("strategy", json("")).is_string() ? a.value("strategy", std::string()) : "";
  if (as == "token") return {f, -1};
  if (as == "group" && a.contains("group_size") && a["group_size"].is_number_integer() &&
      a["group_size"].get<int64_t>() > 0 && a["group_size"].get<int64_t>() <= (int64_t{1} << 20))
    return {f, a["group_size"].get<int64_t>()};
  r.fail(str("quantization_config.", an, ".strategy '", as.substr(0, 40),
             "' is not supported (linnet reads token, and group with a group_size)"));
}

// A group's input_activations of `type` (float: FP8, int: int8), static or dynamic; none where
// it has none.
ActivationRounding input_activations(const ConfigReader& r, const json& g, const std::string& name, const char* type,
                                     const char* dynamic_scheme) {
  if (!given(g, "input_activations")) return {};
  const json& a = g["input_activations"];
  if (a.is_object() && a.value("dynamic", json(true)) == false)
    return static_activations(r, a, name + ".input_activations", type);
  return dynamic_activations(r, a, name + ".input_activations", type, dynamic_scheme);
}

// One compressed-tensors config group's scheme, stored in `format`: its weights' layout and the
// rounding of its input_activations. (Every key that would change the numbers is read or refused.)
WeightLayout ct_group_layout(const ConfigReader& r, const json& g, const std::string& name, const std::string& format) {
  if (given(g, "output_activations")) r.fail(str("quantization_config.", name, ".output_activations is not supported"));
  if (!given(g, "weights") || !g["weights"].is_object()) r.fail(str("quantization_config.", name, ".weights is missing"));
  const json& w = g["weights"];
  const std::string wn = name + ".weights";
  if (format == "pack-quantized") {
    if (given(g, "input_activations"))
      r.fail(str("quantization_config.", name,
                 ".input_activations is not supported with pack-quantized weights (linnet reads W4A16)"));
    return pack_quantized_weights(r, w, wn);
  }
  if (format == "mxfp4-pack-quantized") {
    if (given(g, "input_activations"))
      r.fail(str("quantization_config.", name, ".input_activations is not supported with mxfp4-pack-quantized "
                 "weights (linnet reads MXFP4A16: activations unquantized)"));
    return mxfp4_weights(r, w, wn);
  }
  if (format == "int-quantized") {
    WeightLayout l = int_quantized_weights(r, w, wn);
    l.activations = input_activations(r, g, name, "int", "int-quantized: int8 activations, symmetric, dynamic");
    return l;
  }
  expect_arg(r, w, wn, "num_bits", 8);
  expect_arg(r, w, wn, "type", "float");
  expect_arg(r, w, wn, "symmetric", true);
  expect_arg(r, w, wn, "dynamic", false);
  const std::string strategy = w.value("strategy", json("")).is_string() ? w.value("strategy", std::string()) : "";
  WeightLayout l;
  if (strategy == "tensor") {  // one weight_scale [1] a matrix
    l = WeightLayout::fp8_blocks(WeightLayout::kWhole, WeightLayout::kWhole, "_scale");
  } else if (strategy == "channel") {
    l = WeightLayout::fp8_blocks(1, WeightLayout::kWhole, "_scale");
  } else if (strategy == "block") {
    const json& b = w.value("block_structure", json());
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0 || b[0].get<int64_t>() > (int64_t{1} << 20) ||
        b[1].get<int64_t>() > (int64_t{1} << 20))
      r.fail(str("quantization_config.", wn, ".block_structure must be [rows, cols], got ", b.dump()));
    l = WeightLayout::fp8_blocks(b[0].get<int64_t>(), b[1].get<int64_t>(), "_scale");
  } else {
    r.fail(str("quantization_config.", wn, ".strategy '", strategy.substr(0, 40),
               "' is not supported yet (linnet reads tensor, channel and block)"));
  }
  l.activations = input_activations(r, g, name, "float",
                                    "compressed-tensors FP8: float-quantized weights, dynamic activations");
  return l;
}

// A config group's targets: "Linear" (every linear layer), "re:" and a regular expression
// matched from a module name's start, or a module's whole name. A class name other than
// Linear (an attention module's, for a KV cache scheme) names no linear layer: refused.
std::vector<std::string> ct_targets(const ConfigReader& r, const json& g, const std::string& name) {
  const json& t = g.is_object() ? g.value("targets", json()) : json();
  if (!t.is_array() || t.empty())
    r.fail(str("quantization_config.", name, ".targets must be a list of targets, got ", t.dump().substr(0, 60)));
  std::vector<std::string> out;
  for (const json& v : t) {
    if (!v.is_string()) r.fail(str("quantization_config.", name, ".targets holds ", v.dump().substr(0, 40), ", not a string"));
    const std::string s = v.get<std::string>();
    if (s != "Linear" && s.rfind("re:", 0) != 0 && s.find('.') == std::string::npos)
      r.fail(str("quantization_config.", name, ".targets holds '", s.substr(0, 60),
                 "': linnet reads the targets Linear, re: patterns and module names (a class name other than "
                 "Linear names no linear layer)"));
    out.push_back(s);
  }
  return out;
}

// compressed-tensors (llm-compressor's checkpoints): float-quantized FP8 (weights per channel or
// block, activations rounded to FP8 per token or per group at run time), pack-quantized 4- and
// 8-bit integers, int-quantized W8A8, mxfp4-pack-quantized; one scheme for every linear layer,
// or several config groups, each for its targets ("mixed-precision" where their formats differ).
Quantization compressed_tensors(const ConfigReader& r, const json& q) {
  const std::string format = given(q, "format") && q["format"].is_string() ? q["format"].get<std::string>() : "(none)";
  auto known = [](const std::string& f) {
    return f == "float-quantized" || f == "pack-quantized" || f == "int-quantized" || f == "mxfp4-pack-quantized";
  };
  if (!known(format) && format != "mixed-precision")
    r.fail(str("quantization_config.format '", format.size() > 40 ? format.substr(0, 37) + "..." : format,
               "' is not supported yet (linnet reads compressed-tensors' float-quantized FP8, pack-quantized "
               "4-bit integers, int-quantized 8-bit integers and mxfp4-pack-quantized MXFP4, and mixed-precision "
               "groups of them)"));
  if (given(q, "quantization_status") && q["quantization_status"] != "compressed")
    r.fail(str("quantization_config.quantization_status is ", q["quantization_status"].dump(),
               "; linnet reads checkpoints stored compressed"));
  for (const char* key : {"kv_cache_scheme", "sparsity_config", "transform_config"})
    if (given(q, key) && !(q[key].is_object() && q[key].empty()))
      r.fail(str("quantization_config.", key, " is not supported (", q[key].dump().substr(0, 60), ")"));
  if (!given(q, "config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty())
    r.fail("quantization_config.config_groups must be an object of quantization groups");
  Quantization out;
  out.method = "compressed-tensors";
  out.not_converted = string_list(r, q, "ignore");
  out.compressed_tensors_names = true;
  const json& groups = q["config_groups"];
  for (auto it = groups.begin(); it != groups.end(); ++it) {
    const std::string name = "config_groups." + it.key();
    const json& g = it.value();
    if (!g.is_object()) r.fail(str("quantization_config.", name, " must be an object"));
    std::string fmt = format;
    if (given(g, "format")) {
      fmt = g["format"].is_string() ? g["format"].get<std::string>() : g["format"].dump();
      if (format != "mixed-precision" && fmt != format)
        r.fail(str("quantization_config.", name, ".format ", g["format"].dump().substr(0, 40), " differs from format '",
                   format, "'"));
      if (!known(fmt))
        r.fail(str("quantization_config.", name, ".format '", fmt.substr(0, 40), "' is not supported yet"));
    } else if (format == "mixed-precision") {
      r.fail(str("quantization_config.", name, ".format is missing (the config's format is mixed-precision)"));
    }
    WeightLayout layout = ct_group_layout(r, g, name, fmt);
    layout.dequant_in_scale_dtype = true;  // compressed-tensors' decompression: in the scales' dtype
    out.schemes.push_back({ct_targets(r, g, name), layout});
  }
  out.matrices = out.schemes.front().layout;
  // One scheme for every linear layer: as one layout (describe and errors as before).
  const bool one = std::all_of(out.schemes.begin(), out.schemes.end(), [&](const Quantization::Scheme& s) {
    return s.targets == std::vector<std::string>{"Linear"} && s.layout.describe() == out.matrices.describe();
  });
  if (one) out.schemes.clear();
  return out;
}

// GPTQ (quant_method "gptq": AutoGPTQ's and GPTQModel's checkpoints, TheBloke's and most
// "-GPTQ" models): 4-bit weights packed eight input rows to an int32, stored transposed with
// fp16 scales, zero points and g_idx per module (WeightLayout::gptq_groups).
Quantization gptq(const ConfigReader& r, const json& q) {
  const json bits = q.value("bits", json());
  if (bits != 4 && bits != 8)
    r.fail(str("quantization_config.bits ", bits.dump().substr(0, 20),
               " is not read yet (linnet reads 4- and 8-bit GPTQ; 2 and 3 bits pack otherwise)"));
  const json gs = q.value("group_size", json(128));
  if (!gs.is_number_integer() || (gs.get<int64_t>() <= 0 && gs.get<int64_t>() != -1) ||
      gs.get<int64_t>() > (int64_t{1} << 20))
    r.fail(str("quantization_config.group_size must be a positive integer or -1 (one group a row), got ", gs.dump()));
  const std::string format = q.value("checkpoint_format", json("gptq")).is_string()
                                 ? q.value("checkpoint_format", std::string("gptq"))
                                 : q["checkpoint_format"].dump();
  if (format != "gptq" && format != "gptq_v2")
    r.fail(str("quantization_config.checkpoint_format '", format.substr(0, 40),
               "' is not read (linnet reads GPTQ's \"gptq\" and \"gptq_v2\" layouts)"));
  for (const char* key : {"desc_act", "sym"})
    if (given(q, key) && !q[key].is_boolean())
      r.fail(str("quantization_config.", key, " must be true or false, got ", q[key].dump().substr(0, 40)));
  if (given(q, "lm_head") && q["lm_head"] == true)
    r.fail("quantization_config.lm_head is true: a GPTQ-quantized lm_head is not read yet");
  if (given(q, "modules_in_block_to_quantize"))
    r.fail("quantization_config.modules_in_block_to_quantize is not read yet (linnet reads GPTQ checkpoints whose "
           "every linear layer in the decoder blocks is quantized)");
  // 8 bits: the int8 kernels take q − 128, so every zero point must be 128 (symmetric).
  if (bits == 8 && given(q, "sym") && q["sym"] == false)
    r.fail("quantization_config.sym is false: 8-bit GPTQ with zero points other than 128 is not read yet (linnet reads "
           "symmetric 8-bit GPTQ, as Qwen's -GPTQ-Int8 models ship)");
  Quantization out;
  out.method = "gptq";
  out.matrices = WeightLayout::gptq_groups(gs.get<int64_t>() == -1 ? WeightLayout::kWhole : gs.get<int64_t>(),
                                           format == "gptq", bits.get<int>());
  out.not_converted = string_list(r, q, "modules_to_not_convert");
  if (std::find(out.not_converted.begin(), out.not_converted.end(), "lm_head") == out.not_converted.end())
    out.not_converted.push_back("lm_head");
  return out;
}

// AWQ (quant_method "awq": AutoAWQ's and llm-awq's checkpoints, most "-AWQ" models) in its
// "gemm" layout: 4-bit weights with zero points, eight output rows a word, nibbles interleaved,
// stored transposed with fp16 scales (WeightLayout::awq_groups).
Quantization awq(const ConfigReader& r, const json& q) {
  const json bits = q.value("bits", q.value("w_bit", json()));
  if (bits != 4) r.fail(str("quantization_config.bits ", bits.dump().substr(0, 20), " is not read (AWQ is 4-bit)"));
  const json gs = q.value("group_size", q.value("q_group_size", json(128)));
  if (!gs.is_number_integer() || (gs.get<int64_t>() <= 0 && gs.get<int64_t>() != -1) ||
      gs.get<int64_t>() > (int64_t{1} << 20))
    r.fail(str("quantization_config.group_size must be a positive integer or -1 (one group a row), got ", gs.dump()));
  const json version = q.value("version", json("gemm"));
  if (!version.is_string() || (version != "gemm" && version != "GEMM"))
    r.fail(str("quantization_config.version ", version.dump().substr(0, 40),
               " is not read yet (linnet reads AWQ's \"gemm\" layout; gemv, exllama, ipex and marlin pack otherwise)"));
  if (given(q, "zero_point") && q["zero_point"] != true)
    r.fail(str("quantization_config.zero_point ", q["zero_point"].dump().substr(0, 20),
               " is not read (linnet reads AWQ with zero points, its default)"));
  Quantization out;
  out.method = "awq";
  out.matrices = WeightLayout::awq_groups(gs.get<int64_t>() == -1 ? WeightLayout::kWhole : gs.get<int64_t>());
  out.not_converted = string_list(r, q, "modules_to_not_convert");
  if (std::find(out.not_converted.begin(), out.not_converted.end(), "lm_head") == out.not_converted.end())
    out.not_converted.push_back("lm_head");
  return out;
}

// gpt-oss's MXFP4 (transformers' Mxfp4Config): its experts' gate_up_proj and down_proj as
// "…_blocks" (E2M1, two a byte) and "…_scales" (E8M0 per 32 inputs), rows the outputs; the
// attention, router, embeddings, biases and lm_head as stored.
Quantization gpt_oss_mxfp4(const ConfigReader& r, const json& q, const ModelConfig& c) {
  if (c.model_type != "gpt_oss")
    r.fail(str("quantization_config.quant_method 'mxfp4' is gpt-oss's format for its experts; model_type '",
               c.model_type, "' has none (compressed-tensors' mxfp4-pack-quantized is read for any family)"));
  for (const auto& [k, v] : q.items())
    if (k != "quant_method" && k != "modules_to_not_convert" && !(k == "dequantize" && v == false))
      r.fail(str("quantization_config.", k, " = ", v.dump(), " is not read (mxfp4: quant_method, "
                 "modules_to_not_convert)"));
  Quantization out;
  out.method = "mxfp4";
  out.matrices = WeightLayout::gpt_oss_mxfp4();
  out.not_converted = string_list(r, q, "modules_to_not_convert");
  out.schemes = {{{"re:model\\.layers\\.[0-9]+\\.mlp\\.experts\\.(gate_up|down)_proj"}, out.matrices}};
  for (int64_t i = 0; i < c.layers; ++i)
    for (const char* m : {"gate_up_proj", "down_proj"})
      if (!out.layout_of(str("model.layers.", i, ".mlp.experts.", m)))
        r.fail(str("quantization_config.modules_to_not_convert keeps model.layers.", i, ".mlp.experts.", m,
                   " unquantized: linnet reads gpt-oss's experts in MXFP4 (as it ships) or all in bf16"));
  return out;
}

}  // namespace

std::optional<Quantization> parse_quantization_config(const ConfigReader& r, const ModelConfig& c) {
  if (!given(r.j, "quantization_config")) return std::nullopt;
  const json& q = r.j["quantization_config"];
  if (!q.is_object()) r.fail(str("quantization_config must be an object, got ", q.dump()));
  if (!q.contains("quant_method") || !q["quant_method"].is_string())
    r.fail("quantization_config has no quant_method (a string naming the format)");
  const std::string method = q["quant_method"].get<std::string>();
  if (method == "fp8") return fine_grained_fp8(r, q);
  if (method == "awq") return awq(r, q);
  if (method == "gptq") return gptq(r, q);
  if (method == "mxfp4") return gpt_oss_mxfp4(r, q, c);
  if (method == "compressed-tensors") {
    Quantization out = compressed_tensors(r, q);
    // The experts' grouped products round their rows' inputs as a Linear does (dynamic scales: a
    // row's own). Static ones are one input_scale per expert, which one stacked matrix cannot hold.
    const auto is_static = [](const WeightLayout& l) { return l.activations.stored; };
    if (c.moe() && (is_static(out.matrices) ||
                    std::any_of(out.schemes.begin(), out.schemes.end(),
                                [&](const Quantization::Scheme& s) { return is_static(s.layout); })))
      r.fail(str("quantization_config: a compressed-tensors mixture of experts with static input_activations (",
                 out.describe(), ") is not read yet: each expert has its own input_scale (dynamic activations, "
                 "and weight-only schemes, are read)"));
    return out;
  }
  r.fail(str("quantization_config.quant_method '", method.size() > 40 ? method.substr(0, 37) + "..." : method,
             "' is not supported yet (linnet reads fp8, Hugging Face's fine-grained FP8, and compressed-tensors' "
             "float-quantized FP8, pack-quantized W4A16, int-quantized W8A8 and mxfp4-pack-quantized MXFP4A16, gptq, "
             "awq, and gpt-oss's mxfp4)"));
}

}  // namespace linnet
