#include "checkpoint/packed_file.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <vector>

namespace linnet {

namespace fs = std::filesystem;

std::string checkpoint_fingerprint(const std::string& dir) {
  std::vector<std::string> parts;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name == kPackedFileName || name.ends_with(".tmp")) continue;
    const auto mtime = e.last_write_time().time_since_epoch().count();
    parts.push_back(str(name, ":", e.file_size(), ":", mtime));
  }
  std::sort(parts.begin(), parts.end());
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ";") + p;
  return out;
}

void write_packed_file(const std::string& dir, const Model& m, const std::string& format) {
  if (format.empty()) throw Error("linnet pack: this backend keeps its matrices row-major (nothing to pack)");
  SafetensorsWriter w((fs::path(dir) / kPackedFileName).string());
  w.set_metadata("linnet.format", format);
  w.set_metadata("linnet.dtype", dtype_name(m.generics().t));
  w.set_metadata("linnet.source", checkpoint_fingerprint(dir));
  for (const auto& [name, t] : m.matrices()) {
    LINNET_CHECK(t.packed() && t.data() == t.storage()->data, "linnet pack: ", name, " is not a whole packed matrix");
    w.set_metadata("linnet.rows." + name, std::to_string(t.dim(0)));
    const int64_t padded = static_cast<int64_t>(t.storage()->bytes / (static_cast<size_t>(t.dim(1)) * dtype_size(t.dtype())));
    w.declare(name, t.dtype(), {padded, t.dim(1)});
  }
  for (const auto& [name, t] : m.matrices()) w.write(name, t.storage()->data, t.storage()->bytes);
  w.finish();
}

Tensor PackedFile::matrix(const std::string& name, const std::string& format, DType dtype, const Shape& shape) {
  if (!opened_) {
    opened_ = true;
    const fs::path path = fs::path(dir_) / kPackedFileName;
    if (!fs::exists(path)) return {};
    file_ = std::make_unique<SafetensorsFile>(path.string());
    const auto& meta = file_->metadata();
    auto get = [&](const std::string& k) { auto it = meta.find(k); return it == meta.end() ? std::string() : it->second; };
    std::string why;
    if (get("linnet.format") != format) why = str("its layout is '", get("linnet.format"), "', this backend's '", format, "'");
    else if (get("linnet.dtype") != dtype_name(dtype)) why = str("it holds ", get("linnet.dtype"), ", this run ", dtype_name(dtype));
    else if (get("linnet.source") != checkpoint_fingerprint(dir_)) why = "the checkpoint's files changed since it was written";
    if (!why.empty()) {
      spdlog::warn("{}: not used ({}); packing at load instead. `linnet pack --checkpoint {}` writes it again.",
                   path.string(), why, dir_);
      return {};
    }
    valid_ = true;
  }
  if (!valid_ || !file_->has(name)) return {};
  const auto& meta = file_->metadata();
  const auto rows = meta.find("linnet.rows." + name);
  const Tensor v = file_->view(name);
  // The layout's whole panels of 32 rows: a shorter tensor would be read past its end.
  const int64_t panels_rows = (shape[0] + 31) / 32 * 32;
  if (rows == meta.end() || rows->second != std::to_string(shape[0]) || v.rank() != 2 || v.dim(0) != panels_rows ||
      v.dim(1) != shape[1] || v.dtype() != dtype || v.storage() == nullptr)
    throw Error(str(file_->path(), ": tensor '", name, "' is ", v.describe(), " for a matrix of ", shape.to_string(),
                    " (a damaged packed file: remove it or run linnet pack again)"));
  // A storage of its own (the packed kernels find a view's first row from its start) that
  // keeps the file mapped.
  auto st = std::make_shared<Storage>();
  st->data = const_cast<void*>(v.data());
  st->bytes = v.nbytes();
  st->release = [keep = v.storage()](void*) {};
  st->packed_cols = shape[1];
  used_ = true;
  return Tensor(st, 0, shape, dtype);
}

}  // namespace linnet
