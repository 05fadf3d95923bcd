// CheckpointDir: the weights of a Hugging Face checkpoint directory, whichever of its three
// layouts it uses: model.safetensors; model.safetensors.index.json naming shard files; or
// else every *.safetensors file in the directory. A directory without weights is allowed
// (has() is false everywhere) so that tools can work from config.json alone.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace linnet {

class CheckpointDir {
 public:
  // Opens (maps and validates) every weight file up front, so a broken checkpoint fails here
  // rather than halfway through loading. Throws linnet::Error naming the file at fault.
  explicit CheckpointDir(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  std::vector<std::string> names() const;  // sorted
  const TensorInfo& info(const std::string& name) const;
  const SafetensorsFile& file_of(const std::string& name) const;  // missing → Error
  Tensor view(const std::string& name) const;
  Tensor read(const std::string& name) const;
  Tensor read_rows(const std::string& name, int64_t begin, int64_t end) const;
  Tensor read_cols(const std::string& name, int64_t begin, int64_t end) const;
  Tensor read_block(const std::string& name, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t cols = 0) const;

  // Throws unless the tensor exists with this shape (and dtype).
  void expect(const std::string& name, const Shape& shape) const;
  void expect(const std::string& name, const Shape& shape, DType dtype) const;
  // Throws unless the tensor exists and, seen as 2-D [numel / C, C] with C the product of its
  // trailing dimensions, is `shape` (a fused tensor: transformers' 3-D [E, R, C] experts as E·R
  // rows; gpt-oss's MXFP4 blocks [E, out, in/32, 16] as [E·out, in/2]).
  void expect_2d(const std::string& name, const Shape& shape) const;

  // A multimodal checkpoint's text model (ModelConfig::multimodal): its tensors named as a text
  // checkpoint's — language_model.model.* → model.*, language_model.lm_head.* → lm_head.* (as
  // transformers saves them), model.language_model.* → model.* (its in-memory names) — and every
  // other tensor (the vision tower, the projector) set aside; errors name the tensors as stored.
  // Returns how many were set aside.
  int64_t keep_text_model();

 private:
  const SafetensorsFile& open(const std::string& path);
  void load_index(const std::string& index_path);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;  // stable addresses for file_of()
  std::map<std::string, const SafetensorsFile*> where_;  // tensor → its file
  std::map<std::string, std::string> stored_;            // a renamed tensor → its name in the file
  const std::string& stored(const std::string& name) const;
};

}  // namespace linnet
