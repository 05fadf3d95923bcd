#include "runtime/quantize_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "architectures/hf_config.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/packed_file.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/files.h"
#include "layers/parameters.h"

namespace linnet {

namespace fs = std::filesystem;
using nlohmann::json;

const char* quantize_schemes() { return "fp8-block, fp8-channel, w8a8, w4a16, w4a16-asym"; }

namespace {

constexpr float kE4m3Max = 448.0f;

// q [rows, cols] E4M3 and scales [rows/br, cols/bc] of w, as DeepSeek's and llm-compressor's
// block quantizers make them.
void quantize_fp8_blocks(const Tensor& w, int64_t br, int64_t bc, Tensor& q, Tensor& scales) {
  const Tensor f = w.to(DType::f32);
  const int64_t rows = w.dim(0), cols = w.dim(1), nr = rows / br, nc = cols / bc;
  q = Tensor::empty({rows, cols}, DType::f8_e4m3);
  scales = Tensor::empty({nr, nc}, DType::f32);
  const float* x = f.ptr<float>();
#pragma omp parallel for
  for (int64_t b = 0; b < nr * nc; ++b) {
    const int64_t r0 = b / nc * br, c0 = b % nc * bc;
    float amax = 0;
    for (int64_t r = r0; r < r0 + br; ++r)
      for (int64_t c = c0; c < c0 + bc; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
    const float s = amax > 0 ? amax / kE4m3Max : 1.0f;
    scales.ptr<float>()[b] = s;
    for (int64_t r = r0; r < r0 + br; ++r)
      for (int64_t c = c0; c < c0 + bc; ++c) q.ptr<uint8_t>()[r * cols + c] = f32_to_f8_e4m3(x[r * cols + c] / s);
  }
}

// compressed-tensors' W4A16 (its calculate_qparams and quantize on a 4-bit group scheme), in
// the matrix's dtype as torch computes it (each op in f32, then rounded to the dtype): per row
// and group, symmetric: scale = amax|w| / 7.5 (the dtype's epsilon where 0), q =
// round_half_even(clamp(w / scale, −8, 7)); asymmetric: scale = (mx − mn) / 15 over the group's
// range widened to 0, zero = round_half_even(clamp(−8 − mn / scale, −8, 7)), q =
// round_half_even(clamp(w / scale + zero, −8, 7)). Packed q + 8, eight a word from the low bits;
// zero points + 8 the same way along the rows. words [rows, cols/8] I32, scales [rows, cols/g]
// in w's dtype, zeros (asymmetric) [rows/8, cols/g] I32.
void quantize_int4_groups(const Tensor& w, int64_t g, bool symmetric, Tensor& words, Tensor& scales, Tensor& zeros) {
  const DType dt = w.dtype();
  const Tensor f = w.to(DType::f32);
  const int64_t rows = w.dim(0), cols = w.dim(1), groups = cols / g;
  words = Tensor::zeros({rows, cols / 8}, DType::i32);
  if (!symmetric) zeros = Tensor::zeros({rows / 8, groups}, DType::i32);
  Tensor s32 = Tensor::empty({rows, groups}, DType::f32);
  const float* x = f.ptr<float>();
  const float eps = dt == DType::bf16 ? 0x1p-7f : dt == DType::f16 ? 0x1p-10f : 0x1p-23f;  // torch.finfo(dtype).eps
  auto r_dt = [dt](float v) { return round_to(dt, v); };  // one torch op in the checkpoint's dtype
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < groups; ++b) {
      float scale, zero = 0;
      if (symmetric) {
        float amax = 0;
        for (int64_t c = b * g; c < (b + 1) * g; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
        scale = r_dt(amax / 7.5f);
        if (scale == 0) scale = eps;
      } else {
        float mn = 0, mx = 0;  // (0 is always in the range)
        for (int64_t c = b * g; c < (b + 1) * g; ++c) mn = std::min(mn, x[r * cols + c]), mx = std::max(mx, x[r * cols + c]);
        scale = r_dt((mx - mn) / 15.0f);
        // An all-zero group has scale 0 and no zero point (torch's 0/0); any zero point gives its
        // weights 0: linnet writes 0 and the dtype's epsilon.
        if (scale != 0) zero = std::nearbyint(std::clamp(r_dt(-8.0f - r_dt(mn / scale)), -8.0f, 7.0f));
        if (scale == 0) scale = eps;
        zeros.ptr<uint32_t>()[(r / 8) * groups + b] |= static_cast<uint32_t>(static_cast<int>(zero) + 8) << (4 * (r % 8));
      }
      s32.ptr<float>()[r * groups + b] = scale;
      auto* out = words.ptr<uint32_t>() + r * (cols / 8);
      for (int64_t c = b * g; c < (b + 1) * g; ++c) {
        const float v = symmetric ? r_dt(x[r * cols + c] / scale) : r_dt(r_dt(x[r * cols + c] / scale) + zero);
        const float q = std::nearbyint(std::clamp(v, -8.0f, 7.0f));
        out[c / 8] |= static_cast<uint32_t>(static_cast<int>(q) + 8) << (4 * (c % 8));
      }
    }
  scales = s32.to(dt);
}

// compressed-tensors' per-channel weights (its calculate_qparams and quantize on a symmetric
// "channel" scheme), in the matrix's dtype as torch computes it: per row, scale = amax|w| /
// (half the range: 448 for FP8, 127.5 for int8; the dtype's epsilon where 0); FP8: q =
// e4m3(clamp(w / scale, ±448)); int8: q = round_half_even(clamp(w / scale, −128, 127)).
// q [rows, cols] (f8_e4m3 or i8), scales [rows, 1] in w's dtype.
void quantize_channels(const Tensor& w, DType qtype, Tensor& q, Tensor& scales) {
  const DType dt = w.dtype();
  const Tensor f = w.to(DType::f32);
  const int64_t rows = w.dim(0), cols = w.dim(1);
  const bool fp8 = qtype == DType::f8_e4m3;
  q = Tensor::empty({rows, cols}, qtype);
  Tensor s32 = Tensor::empty({rows, 1}, DType::f32);
  const float* x = f.ptr<float>();
  const float eps = dt == DType::bf16 ? 0x1p-7f : dt == DType::f16 ? 0x1p-10f : 0x1p-23f;  // torch.finfo(dtype).eps
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
    float scale = round_to(dt, amax / (fp8 ? kE4m3Max : 127.5f));
    if (scale == 0) scale = eps;
    s32.ptr<float>()[r] = scale;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = round_to(dt, x[r * cols + c] / scale);
      if (fp8) q.ptr<uint8_t>()[r * cols + c] = f32_to_f8_e4m3(std::clamp(v, -kE4m3Max, kE4m3Max));
      else q.ptr<int8_t>()[r * cols + c] = static_cast<int8_t>(std::nearbyint(std::clamp(v, -128.0f, 127.0f)));
    }
  }
  scales = s32.to(dt);
}

// config.json's quantization_config as compressed-tensors 0.20.1's update_config writes it for
// one scheme on every Linear with lm_head ignored (so transformers and vLLM read it as they
// read llm-compressor's).
json compressed_tensors_config(const std::string& format, const json& weights, const json& input_activations) {
  return {{"config_groups",
           {{"group_0",
             {{"format", format}, {"input_activations", input_activations}, {"output_activations", nullptr},
              {"targets", {"Linear"}}, {"weights", weights}}}}},
          {"format", format}, {"global_compression_ratio", nullptr}, {"ignore", {"lm_head"}},
          {"kv_cache_scheme", nullptr}, {"moe_sparsity_config", nullptr}, {"quant_method", "compressed-tensors"},
          {"quantization_status", "compressed"},
          {"sparsity_config", json::object()}, {"transform_config", json::object()}, {"version", "0.20.1"}};
}
json ct_args(int num_bits, const char* type, const char* strategy, json group_size, bool dynamic) {
  return {{"dynamic", dynamic}, {"group_size", std::move(group_size)}, {"num_bits", num_bits},
          {"strategy", strategy}, {"symmetric", true}, {"type", type}};
}

}  // namespace

void quantize_checkpoint(const std::string& src, const std::string& out, const QuantizeOptions& o) {
  const bool asym = o.scheme == "w4a16-asym", w4a16 = o.scheme == "w4a16" || asym;
  const bool fp8_channel = o.scheme == "fp8-channel", w8a8 = o.scheme == "w8a8";
  const bool channels = fp8_channel || w8a8;  // one scale a row
  if (o.scheme != "fp8-block" && !w4a16 && !channels)
    throw Error(str("linnet quantize: scheme '", o.scheme, "' is not one linnet writes (schemes: ", quantize_schemes(), ")"));
  if (o.block_rows <= 0 || o.block_cols <= 0)
    throw Error(str("linnet quantize: --block ", o.block_rows, ",", o.block_cols, " must be two positive sizes"));
  if (w4a16 && (o.group <= 0 || o.group % 8 != 0))
    throw Error(str("linnet quantize: --group ", o.group, " must be a positive multiple of 8 (eight 4-bit values a word)"));
  ModelConfig c = load_hf_config(src);
  if (c.quantization)
    throw Error(str(src, ": already quantized (quantization_config ", c.quantization->describe(),
                    "); linnet quantize reads bf16, f16 or f32 checkpoints"));
  if (c.moe()) throw Error(str(src, ": linnet quantize does not write mixtures of experts yet"));
  if (!c.multimodal.empty())
    throw Error(str(src, ": a ", c.multimodal, " multimodal checkpoint (its text model: ", c.model_type,
                    "); linnet quantize reads text checkpoints"));
  if (fs::exists(out) && !fs::is_empty(out)) throw Error(str(out, ": exists and is not empty"));

  // The tensors to quantize: the parameter table's linear layers under the quantization they
  // are about to have (one rule: layers/parameter_table.cpp), lm_head not converted.
  const WeightLayout layout = w4a16        ? WeightLayout::int4_groups(o.group, !asym)
                              : fp8_channel ? WeightLayout::fp8_blocks(1, WeightLayout::kWhole, "_scale")
                              : w8a8        ? WeightLayout::int8_groups(WeightLayout::kWhole)
                                            : WeightLayout::fp8_blocks(o.block_rows, o.block_cols);
  c.quantization = o.scheme == "fp8-block" ? Quantization{"fp8", layout, {"lm_head"}}
                                           : Quantization{"compressed-tensors", layout, {"lm_head"}, true};
  // The unit each quantized matrix must be whole in: a block, or a group of a row.
  const int64_t unit_rows = o.scheme == "fp8-block" ? o.block_rows : 1,
                unit_cols = w4a16 ? o.group : channels ? 1 : o.block_cols;
  std::set<std::string> linear;
  for (const ParamSpec& p : parameter_specs(c, bind_generics(c, RunOptions{1, 1, 1, 1, std::nullopt})))
    if (!p.layout.dense()) linear.insert(p.hf_name);

  const CheckpointDir dir(src);
  for (const std::string& n : linear) {
    const TensorInfo& ti = dir.info(n);
    if (!is_float(ti.dtype) || ti.shape.rank() != 2)
      throw Error(str(dir.file_of(n).path(), ": tensor '", n, "' is ", dtype_name(ti.dtype), " ", ti.shape.to_string(),
                      ", not a float matrix"));
    if (w4a16 && ti.shape[1] % o.group)
      throw Error(str(dir.file_of(n).path(), ": tensor '", n, "' ", ti.shape.to_string(), " is not whole groups of ",
                      o.group, " columns (compressed-tensors quantizes whole groups): choose --group accordingly"));
    if (asym && ti.shape[0] % 8)
      throw Error(str(dir.file_of(n).path(), ": tensor '", n, "' ", ti.shape.to_string(),
                      " has rows that are not whole words of 8 (compressed-tensors packs the zero points eight rows "
                      "to an I32)"));
    if (ti.shape[0] % unit_rows || ti.shape[1] % unit_cols)
      throw Error(str(dir.file_of(n).path(), ": tensor '", n, "' ", ti.shape.to_string(), " is not whole blocks of ",
                      o.block_rows, "×", o.block_cols, " (transformers reads the block size back from the scales' grid, "
                      "so every quantized matrix must divide by it): choose --block accordingly"));
  }
  fs::create_directories(out);
  SafetensorsWriter writer((fs::path(out) / "model.safetensors").string());
  writer.set_metadata("format", "pt");
  const std::vector<std::string> names = dir.names();
  for (const std::string& n : names) {
    const TensorInfo& ti = dir.info(n);
    if (!linear.count(n)) {
      writer.declare(n, ti.dtype, ti.shape);
      continue;
    }
    if (w4a16) {  // compressed-tensors' names: …weight_packed, …weight_scale, …weight_shape
      writer.declare(n + "_packed", DType::i32, {ti.shape[0], ti.shape[1] / 8});
      writer.declare(n + "_scale", ti.dtype, {ti.shape[0], ti.shape[1] / o.group});
      writer.declare(n + "_shape", DType::i64, {2});
      if (asym) writer.declare(n + "_zero_point", DType::i32, {ti.shape[0] / 8, ti.shape[1] / o.group});
      continue;
    }
    if (channels) {  // compressed-tensors' names: …weight, …weight_scale [rows, 1] in the dtype
      writer.declare(n, fp8_channel ? DType::f8_e4m3 : DType::i8, ti.shape);
      writer.declare(n + "_scale", ti.dtype, {ti.shape[0], 1});
      continue;
    }
    writer.declare(n, DType::f8_e4m3, ti.shape);
    writer.declare(n + "_scale_inv", DType::f32, {ti.shape[0] / o.block_rows, ti.shape[1] / o.block_cols});
  }
  for (const std::string& n : names) {
    const Tensor t = dir.view(n);
    if (!linear.count(n)) {
      writer.write(n, t.data(), t.nbytes());
    } else if (w4a16) {
      Tensor words, scales, zeros;
      quantize_int4_groups(t, o.group, !asym, words, scales, zeros);
      const int64_t shape[2] = {t.dim(0), t.dim(1)};
      writer.write(n + "_packed", words.data(), words.nbytes());
      writer.write(n + "_scale", scales.data(), scales.nbytes());
      writer.write(n + "_shape", shape, sizeof shape);
      if (asym) writer.write(n + "_zero_point", zeros.data(), zeros.nbytes());
    } else if (channels) {
      Tensor q, scales;
      quantize_channels(t, fp8_channel ? DType::f8_e4m3 : DType::i8, q, scales);
      writer.write(n, q.data(), q.nbytes());
      writer.write(n + "_scale", scales.data(), scales.nbytes());
    } else {
      Tensor q, scales;
      quantize_fp8_blocks(t, o.block_rows, o.block_cols, q, scales);
      writer.write(n, q.data(), q.nbytes());
      writer.write(n + "_scale_inv", scales.data(), scales.nbytes());
    }
    t.drop_pages();
  }
  writer.finish();

  json cfg = json::parse(read_text_file(str(src, "/config.json"), "config.json"));
  if (w4a16) {
    json weights = ct_args(4, "int", "group", o.group, false);
    weights["symmetric"] = !asym;  // (llm-compressor's W4A16_ASYM)
    cfg["quantization_config"] = compressed_tensors_config("pack-quantized", weights, nullptr);
  } else if (fp8_channel)  // llm-compressor's FP8_DYNAMIC
    cfg["quantization_config"] = compressed_tensors_config(
        "float-quantized", ct_args(8, "float", "channel", nullptr, false), ct_args(8, "float", "token", nullptr, true));
  else if (w8a8)  // llm-compressor's W8A8
    cfg["quantization_config"] = compressed_tensors_config(
        "int-quantized", ct_args(8, "int", "channel", nullptr, false), ct_args(8, "int", "token", nullptr, true));
  else
    cfg["quantization_config"] = json{{"quant_method", "fp8"},
                                      {"activation_scheme", "dynamic"},
                                      {"weight_block_size", {o.block_rows, o.block_cols}},
                                      {"modules_to_not_convert", {"lm_head"}}};
  std::ofstream(fs::path(out) / "config.json") << cfg.dump(2) << "\n";
  // The rest (tokenizer, generation config, chat template) as it is; not the weights.
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name == "config.json" || name.ends_with(".safetensors") ||
        name == "model.safetensors.index.json" || name == kPackedFileName)
      continue;
    fs::copy_file(e.path(), fs::path(out) / name, fs::copy_options::overwrite_existing);
  }
}

}  // namespace linnet
