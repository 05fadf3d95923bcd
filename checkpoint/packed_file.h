// A checkpoint's matrices saved in a backend's packed layout (`linnet pack`): a safetensors
// file beside the checkpoint, mapped on later loads and used as it is — no copy, no packing,
// read from the page cache as the first tokens touch it (what llama.cpp does with a GGUF).
//
// It is trusted only when it is provably the right one (docs/design.md, "The packed file"):
//   - its layout and T are this run's;
//   - it was made from these very files: config.json, the index and every *.safetensors file
//     by device, inode, size, modification and change time (ns), and a hash of each one's
//     content (config, index) or header (safetensors: names, dtypes, shapes, offsets) — a
//     file rewritten in place, or another checkpoint's pack with matched times, differs;
//   - each matrix's bytes hash to the checksum stored for it (checked at load, as each is
//     mapped: the whole file is read once, in parallel, at memory speed).
// Anything else is a warning and a fall-back to packing at load (that matrix, or all of
// them), never a wrong number. `linnet pack --verify` checks a file on demand.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/safetensors.h"

namespace linnet {

inline constexpr const char* kPackedFileName = "linnet-packed.safetensors";

// What identifies the files of checkpoint directory `dir` a packed file is made from (JSON).
std::string checkpoint_identity(const std::string& dir);

// Writes `matrices` (model names → whole packed tensors, as a backend holds them in `format`)
// of a checkpoint in dtype t to dir/kPackedFileName, each with its checksum.
void write_packed_file(const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& matrices, DType t,
                       const std::string& format);

// The packed file of a checkpoint, opened on first use.
class PackedFile {
 public:
  explicit PackedFile(std::string dir) : dir_(std::move(dir)) {}
  // Matrix `name` when the file exists, was made in `format` and `dtype` from these very
  // files, holds rows × cols = shape, and its bytes match their checksum; else an undefined
  // tensor (with a warning saying why, unless there is no file).
  Tensor matrix(const std::string& name, const std::string& format, DType dtype, const Shape& shape);
  bool used() const { return used_; }
  // Matrices it held that were refused (checksum, shape): packed at load instead.
  int refused() const { return refused_; }
  // Seconds spent checking checksums so far.
  double verify_seconds() const { return verify_seconds_; }

 private:
  std::string dir_;
  bool opened_ = false, valid_ = false, used_ = false;
  double verify_seconds_ = 0;
  int refused_ = 0;
  std::unique_ptr<SafetensorsFile> file_;
};

// `linnet pack --verify`: every reason the packed file of `dir` would not be used as a whole
// (another source, a matrix whose bytes or shape are wrong), empty when it is sound — for
// the layout and T it says it holds.
std::vector<std::string> verify_packed_file(const std::string& dir);

}  // namespace linnet
