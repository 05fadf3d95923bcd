// config.json's quantization_config → Quantization (layers/quantization.h). Read: Hugging
// Face's fine-grained FP8 (quant_method "fp8": DeepSeek-V3/R1, Qwen3-*-FP8). Every other
// method is refused by name, as is any key of the FP8 config that would change the numbers.
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

}  // namespace

std::optional<Quantization> parse_quantization_config(const ConfigReader& r, const ModelConfig& c) {
  if (!given(r.j, "quantization_config")) return std::nullopt;
  const json& q = r.j["quantization_config"];
  if (!q.is_object()) r.fail(str("quantization_config must be an object, got ", q.dump()));
  if (!q.contains("quant_method") || !q["quant_method"].is_string())
    r.fail("quantization_config has no quant_method (a string naming the format)");
  const std::string method = q["quant_method"].get<std::string>();
  if (method != "fp8")
    r.fail(str("quantization_config.quant_method '", method.size() > 40 ? method.substr(0, 37) + "..." : method,
               "' is not supported yet (linnet reads fp8: Hugging Face's fine-grained FP8)"));
  (void)c;
  return fine_grained_fp8(r, q);
}

}  // namespace linnet
