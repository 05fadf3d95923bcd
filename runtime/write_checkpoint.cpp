#include "runtime/write_checkpoint.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "architectures/hf_config.h"
#include "checkpoint/write_weights.h"
#include "core/files.h"

namespace linnet {

namespace fs = std::filesystem;

namespace {

void write_config(const ModelConfig& c, const std::string& dir) {
  fs::create_directories(dir);
  write_text_file((fs::path(dir) / "config.json").string(), to_hf_config(c).dump(2) + "\n", "the config");
}

}  // namespace

void write_random_checkpoint(ModelConfig c, const std::string& dir, DType dtype, uint64_t seed) {
  c.dtype = dtype;
  write_config(c, dir);
  write_random_weights(c, dir, dtype, seed);
}

ModelConfig import_llama2c(const std::string& bin_path, const std::string& dir) {
  const ModelConfig c = import_llama2c_weights(bin_path, dir);
  write_config(c, dir);
  return c;
}

}  // namespace linnet
