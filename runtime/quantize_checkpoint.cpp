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

const char* quantize_schemes() { return "fp8-block (fp8-channel, w8a8, w4a16: not yet)"; }

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

}  // namespace

void quantize_checkpoint(const std::string& src, const std::string& out, const QuantizeOptions& o) {
  if (o.scheme != "fp8-block")
    throw Error(str("linnet quantize: scheme '", o.scheme, "' is not written yet (schemes: ", quantize_schemes(), ")"));
  if (o.block_rows <= 0 || o.block_cols <= 0)
    throw Error(str("linnet quantize: --block ", o.block_rows, ",", o.block_cols, " must be two positive sizes"));
  ModelConfig c = load_hf_config(src);
  if (c.quantization)
    throw Error(str(src, ": already quantized (quantization_config ", c.quantization->describe(),
                    "); linnet quantize reads bf16, f16 or f32 checkpoints"));
  if (c.moe()) throw Error(str(src, ": linnet quantize does not write mixtures of experts yet"));
  if (fs::exists(out) && !fs::is_empty(out)) throw Error(str(out, ": exists and is not empty"));

  // The tensors to quantize: the parameter table's linear layers under the quantization they
  // are about to have (one rule: layers/parameter_table.cpp), lm_head not converted.
  c.quantization = Quantization{"fp8", WeightLayout::fp8_blocks(o.block_rows, o.block_cols), {"lm_head"}};
  std::set<std::string> linear;
  for (const ParamSpec& p : parameter_specs(c, bind_generics(c, RunOptions{1, 1, 1, 1, std::nullopt})))
    if (!p.layout.dense()) linear.insert(p.hf_name);

  const CheckpointDir dir(src);
  for (const std::string& n : linear) {
    const TensorInfo& ti = dir.info(n);
    if (!is_float(ti.dtype) || ti.shape.rank() != 2)
      throw Error(str(dir.file_of(n).path(), ": tensor '", n, "' is ", dtype_name(ti.dtype), " ", ti.shape.to_string(),
                      ", not a float matrix"));
    if (ti.shape[0] % o.block_rows || ti.shape[1] % o.block_cols)
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
    writer.declare(n, DType::f8_e4m3, ti.shape);
    writer.declare(n + "_scale_inv", DType::f32, {ti.shape[0] / o.block_rows, ti.shape[1] / o.block_cols});
  }
  for (const std::string& n : names) {
    const Tensor t = dir.view(n);
    if (!linear.count(n)) {
      writer.write(n, t.data(), t.nbytes());
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
  cfg["quantization_config"] = {{"quant_method", "fp8"},
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
