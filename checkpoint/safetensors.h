// Reading and writing safetensors files: an 8-byte little-endian header length, a JSON header
// ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}), then the
// data section. Readers memory-map the file, so a checkpoint costs address space, not RAM, and
// only the bytes actually read are paged in. Every malformed file is a linnet::Error naming it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace linnet {

struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  size_t begin = 0, end = 0;  // byte range inside the data section
};

// Safetensors' dtype spelling ("BF16", ...) and back. The parser throws for anything linnet
// cannot hold, including real safetensors dtypes such as F64 or U8.
const char* safetensors_dtype_name(DType t);

class SafetensorsFile {
 public:
  // Maps the file read-only and validates the whole header: every entry's dtype, shape and
  // byte range, and that no two tensors share bytes. Throws linnet::Error naming the file.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return infos_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // missing → Error
  std::vector<std::string> names() const;                 // in data-offset order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Where the data section starts: 8 + the header's length (tensor i's bytes are at data_start() + begin).
  size_t data_start() const { return data_start_; }

  // Zero-copy host tensor into the mapping; it keeps the mapping alive on its own. If the
  // bytes are not aligned for the dtype (a foreign writer's choice), an aligned copy instead.
  Tensor view(const std::string& name) const;
  Tensor read(const std::string& name) const;  // owning copy
  // Rows [begin, end) of dimension 0 (rank >= 1), copied; touches only those bytes.
  Tensor read_rows(const std::string& name, int64_t begin, int64_t end) const;
  // Columns [begin, end) of a 2-D tensor, copied row by row; touches only those bytes.
  Tensor read_cols(const std::string& name, int64_t begin, int64_t end) const;
  // Rows [r0, r1) and columns [c0, c1) of the tensor seen as 2-D [numel / last dim, last dim]
  // (a 3-D [E, R, C] is E·R rows: transformers' fused experts), copied.
  // `cols`: the 2-D view's columns, a product of trailing dimensions (gpt-oss's MXFP4 blocks
  // [E, out, in/32, 16] as [E·out, in/2]); 0: the last dimension.
  Tensor read_block(const std::string& name, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t cols = 0) const;

 private:
  const char* bytes_of(const TensorInfo& ti) const;

  std::string path_;
  std::shared_ptr<Storage> mapping_;  // the whole file
  size_t data_start_ = 0;             // 8 + header length
  std::map<std::string, TensorInfo> infos_;
  std::vector<std::string> order_;  // names by data offset
  std::map<std::string, std::string> metadata_;
};

// Streams a safetensors file: declare every tensor first (the header needs all shapes), then
// write each tensor's bytes, in declaration order, in as many pieces as convenient, so no
// more than one piece needs to be in memory. The file appears under its name only on finish().
class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(std::string path);  // creates "<path>.tmp"
  ~SafetensorsWriter();                          // without finish(): removes "<path>.tmp"
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  void set_metadata(const std::string& key, const std::string& value);
  void declare(const std::string& name, DType dtype, const Shape& shape);
  void write(const std::string& name, const void* data, size_t bytes);
  void finish();

 private:
  struct Entry {
    TensorInfo info;
    size_t written = 0;
  };
  void write_header();
  void put(const void* data, size_t bytes);
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_, tmp_path_;
  std::FILE* file_ = nullptr;
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  size_t data_bytes_ = 0;
  size_t current_ = 0;  // first entry not yet complete
  bool header_written_ = false, finished_ = false, broken_ = false;
};

// One-shot writer for host tensors (tests, small exports).
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace linnet
