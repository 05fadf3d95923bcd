// SafetensorsWriter: streams tensors into "<path>.tmp" and renames it on finish(), so a crash
// or an error never leaves a half-written file under the real name.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"

namespace linnet {

SafetensorsWriter::SafetensorsWriter(std::string path) : path_(std::move(path)), tmp_path_(path_ + ".tmp") {
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!file_) throw Error(str(tmp_path_, ": cannot create: ", std::strerror(errno)));
  // Weights arrive in large pieces; a big buffer keeps small ones from costing a syscall each.
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_) std::fclose(file_);
  if (!finished_) std::remove(tmp_path_.c_str());
}

void SafetensorsWriter::fail(const std::string& what) const { throw Error(str(path_, ": ", what)); }

namespace {
// JSON strings must be UTF-8; refuse bad text when it is given, not when the header is built.
bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}
}  // namespace

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  if (header_written_) fail(str("set_metadata('", key, "') after writing began"));
  if (!valid_utf8(key) || !valid_utf8(value)) fail(str("metadata key/value for '", key, "' is not valid UTF-8"));
  metadata_[key] = value;
}

void SafetensorsWriter::declare(const std::string& name, DType dtype, const Shape& shape) {
  if (header_written_) fail(str("declare('", name, "') after writing began; declare every tensor first"));
  if (name.empty() || name == "__metadata__") fail(str("'", name, "' is not a valid tensor name"));
  if (!valid_utf8(name)) fail("tensor name is not valid UTF-8");
  if (index_.count(name)) fail(str("tensor '", name, "' declared twice"));
  uint64_t numel = 1, nbytes = 0, end = 0;
  for (int64_t d : shape.dims()) {
    if (d < 0) fail(str("tensor '", name, "': negative dimension in shape ", shape.to_string()));
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) ||
        numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(str("tensor '", name, "': shape ", shape.to_string(), " is too large"));
  }
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(dtype)), &nbytes) ||
      __builtin_add_overflow(static_cast<uint64_t>(data_bytes_), nbytes, &end))
    fail(str("tensor '", name, "': shape ", shape.to_string(), " is too large"));
  index_[name] = entries_.size();
  entries_.push_back({TensorInfo{name, dtype, shape, data_bytes_, end}, 0});
  data_bytes_ = end;
}

void SafetensorsWriter::put(const void* data, size_t bytes) {
  if (broken_) fail(str("an earlier write to ", tmp_path_, " failed"));
  if (bytes && std::fwrite(data, 1, bytes, file_) != bytes) {
    broken_ = true;  // the file now holds an unknown prefix: nothing may follow
    fail(str("write to ", tmp_path_, " failed: ", std::strerror(errno)));
  }
}

void SafetensorsWriter::write_header() {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  for (const Entry& e : entries_)
    header[e.info.name] = {{"dtype", safetensors_dtype_name(e.info.dtype)},
                           {"shape", e.info.shape.dims()},
                           {"data_offsets", {e.info.begin, e.info.end}}};
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned: then every tensor whose
  // offset suits its dtype can be viewed in place after mapping.
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  put(len, 8);
  put(text.data(), text.size());
  header_written_ = true;
}

void SafetensorsWriter::write(const std::string& name, const void* data, size_t bytes) {
  if (finished_) fail(str("write('", name, "') after finish()"));
  auto it = index_.find(name);
  if (it == index_.end()) fail(str("write('", name, "'): tensor was never declared"));
  if (!header_written_) write_header();
  // Empty tensors are complete from the start; step over them.
  while (current_ < entries_.size() && entries_[current_].written == entries_[current_].info.end - entries_[current_].info.begin)
    ++current_;
  Entry& e = entries_[it->second];
  const size_t size = e.info.end - e.info.begin;
  if (it->second < current_ || (it->second == current_ && bytes > size - e.written)) {
    if (bytes == 0) return;
    fail(str("write('", name, "'): ", bytes, " more bytes overflow the tensor (", e.written, " of ", size,
             " already written)"));
  }
  if (it->second > current_) {
    if (bytes == 0) return;
    fail(str("write('", name, "') out of order: tensor '", entries_[current_].info.name, "' is not complete (",
             entries_[current_].written, " of ", entries_[current_].info.end - entries_[current_].info.begin,
             " bytes)"));
  }
  put(data, bytes);
  e.written += bytes;
}

void SafetensorsWriter::finish() {
  if (finished_) fail("finish() called twice");
  if (broken_ || !file_) fail(str("an earlier write to ", tmp_path_, " failed"));
  for (const Entry& e : entries_)
    if (e.written != e.info.end - e.info.begin)
      fail(str("finish(): tensor '", e.info.name, "' is incomplete (", e.written, " of ", e.info.end - e.info.begin,
               " bytes written)"));
  if (!header_written_) write_header();
  // fsync before rename: otherwise a power cut could leave the new name on empty data.
  std::FILE* f = std::exchange(file_, nullptr);
  int err = 0;
  if (std::fflush(f) != 0 || ::fsync(::fileno(f)) != 0) err = errno;
  if (std::fclose(f) != 0 && !err) err = errno;
  if (err) fail(str("closing ", tmp_path_, " failed: ", std::strerror(err)));
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    fail(str("cannot rename ", tmp_path_, " to ", path_, ": ", std::strerror(errno)));
  finished_ = true;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter w(path);
  for (const auto& [key, value] : metadata) w.set_metadata(key, value);
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw Error(str(path, ": tensor '", name, "' is undefined"));
    if (t.device() != Device::cpu) throw Error(str(path, ": tensor '", name, "' is on ", device_name(t.device()), "; save host tensors"));
    w.declare(name, t.dtype(), t.shape());
  }
  for (const auto& [name, t] : tensors) w.write(name, t.data(), t.nbytes());
  w.finish();
}

}  // namespace linnet
