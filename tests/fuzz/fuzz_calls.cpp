// CALLS.json, the entries `linnet run` calls: checked against the card before any model.
#include "core/error.h"
#include "fuzz_util.h"
#include "launcher/calls.h"
#include "layers/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const linnet::Generics g = [] {
    linnet::ModelConfig c;
    c.vocab = 97, c.hidden = 32, c.heads = 4, c.kv_heads = 2, c.inner = 48, c.layers = 2, c.max_position = 64;
    return linnet::bind_generics(c, linnet::RunOptions{2, 32, 1, 8, std::nullopt});
  }();
  const std::string path = linnet::fuzz::as_file(data, size, "calls.json");
  try {
    (void)linnet::cli::read_calls(path, {}, g);
  } catch (const linnet::Error&) {
  }
  return 0;
}
