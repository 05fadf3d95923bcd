// A checkpoint's matrices saved in a backend's packed layout (`linnet pack`): a safetensors
// file beside the checkpoint, mapped on later loads and used as it is — no copy, no packing,
// read from the page cache as the first tokens touch it (what llama.cpp does with a GGUF).
// It names the layout, T and the checkpoint's files (names, sizes, modification times); a
// load whose backend, dtype or files differ ignores it with a warning and packs as before.
#pragma once
#include <memory>
#include <string>

#include "checkpoint/safetensors.h"
#include "layers/model.h"

namespace linnet {

inline constexpr const char* kPackedFileName = "linnet-packed.safetensors";

// What identifies a checkpoint directory's files as they are now (the packed file aside).
std::string checkpoint_fingerprint(const std::string& dir);

// Writes m's matrices, as its backend holds them in `format`, to dir/kPackedFileName.
void write_packed_file(const std::string& dir, const Model& m, const std::string& format);

// The packed file of a checkpoint, opened on first use.
class PackedFile {
 public:
  explicit PackedFile(std::string dir) : dir_(std::move(dir)) {}
  // Matrix `name` when the file exists and was made in `format` and `dtype` from these very
  // files, with rows × cols = shape; else an undefined tensor.
  Tensor matrix(const std::string& name, const std::string& format, DType dtype, const Shape& shape);
  bool used() const { return used_; }

 private:
  std::string dir_;
  bool opened_ = false, valid_ = false, used_ = false;
  std::unique_ptr<SafetensorsFile> file_;
};

}  // namespace linnet
