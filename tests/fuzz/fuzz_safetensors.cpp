// A safetensors file as an attacker writes it: the header's JSON, dtypes, shapes and offsets.
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = linnet::fuzz::as_file(data, size, "model.safetensors");
  try {
    linnet::SafetensorsFile f(path);
    for (const std::string& name : f.names()) {
      const linnet::Tensor v = f.view(name);
      if (v.rank() >= 1 && v.dim(0) > 0) (void)f.read_rows(name, 0, 1);
      if (v.rank() == 2 && v.dim(1) > 0) (void)f.read_cols(name, 0, 1);
    }
  } catch (const linnet::Error&) {
  }
  return 0;
}
