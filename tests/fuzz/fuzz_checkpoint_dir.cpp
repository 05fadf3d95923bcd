// A checkpoint folder's model.safetensors.index.json (which files, which tensors) and
// config.json (its quantization_config's module patterns included): the two JSON files a
// checkpoint folder brings besides the weights.
#include <filesystem>

#include "checkpoint/checkpoint_dir.h"
#include "architectures/hf_config.h"
#include "core/error.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first byte chooses the file; the rest is its text.
  if (size == 0) return 0;
  const bool index = data[0] & 1;
  const std::string path =
      linnet::fuzz::as_file(data + 1, size - 1, index ? "model.safetensors.index.json" : "config.json");
  const std::string dir = linnet::fuzz::dir_of(path);
  try {
    if (index) {
      linnet::CheckpointDir d(dir);
      for (const auto& n : d.names()) (void)d.info(n);
    } else {
      const linnet::ModelConfig c = linnet::load_hf_config(dir);
      // A quantized config's module patterns, as the parameter table asks them (PCRE2, limited).
      if (c.quantization)
        for (const char* m : {"model.layers.0.mlp.down_proj", "model.layers.11.self_attn.q_proj", "lm_head"})
          (void)c.quantization->converts(m);
    }
  } catch (const linnet::Error&) {
  }
  std::filesystem::remove(path);
  return 0;
}
