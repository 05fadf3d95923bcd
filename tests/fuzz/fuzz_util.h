// Shared by the libFuzzer targets (tests/fuzz/README.md): the input as a file (most parsers
// read files: a path they are given), and the rule every target checks — outside input ends
// in a result or a linnet::Error (or a UsageError), never a crash, a hang or undefined
// behaviour (the sanitizers watch for those).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace linnet::fuzz {

// A file holding `data` (in a folder of this process's own), rewritten for each input.
inline std::string as_file(const uint8_t* data, size_t size, const std::string& name) {
  static const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("linnet-fuzz-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    if (size) std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  return path;
}

inline std::string dir_of(const std::string& path) { return std::filesystem::path(path).parent_path().string(); }

// Fixtures the targets read (a real tokenizer for the request bodies), from the source tree.
inline std::string source(const std::string& rel) { return std::string(LINNET_FUZZ_SOURCE_DIR) + "/" + rel; }

}  // namespace linnet::fuzz
