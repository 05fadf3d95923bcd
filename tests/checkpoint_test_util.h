// Helpers shared by the checkpoint tests: a fresh temporary folder per test, raw file
// writing for hand-made (often broken) safetensors files, and error-message capture.
#pragma once
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace linnet::testutil {

// A new, empty folder under the test temp dir, removed with everything in it at scope end.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "linnet_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
    if (test) name += std::string("_") + test->name();
    path_ = std::filesystem::path(::testing::TempDir()) / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string operator/(const std::string& file) const { return (path_ / file).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The bytes of a safetensors file with this header text (unpadded) and data section.
inline std::string safetensors_bytes(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  return out + header + data;
}

// The message of the linnet::Error that f throws; a test failure if it throws nothing or
// something else.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const linnet::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected linnet::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected linnet::Error, nothing was thrown";
  return "";
}

}  // namespace linnet::testutil
