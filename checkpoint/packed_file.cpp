#include "checkpoint/packed_file.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/checksum.h"
#include "core/files.h"
#include "core/weight_layout.h"

namespace linnet {

namespace fs = std::filesystem;

namespace {

// The bytes of a safetensors file's header (its 8-byte length and the JSON), or of a whole
// small file: what its hash covers.
std::string header_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8] = {};
  if (!in.read(reinterpret_cast<char*>(len), 8)) return {};
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
  n = std::min<uint64_t>(n, 100 << 20);  // a real header is far smaller; a damaged one is hashed as far as this
  std::string out(reinterpret_cast<const char*>(len), 8);
  out.resize(8 + n);
  in.read(out.data() + 8, static_cast<std::streamsize>(n));
  out.resize(8 + static_cast<size_t>(in.gcount()));
  return out;
}

int64_t ns(const struct timespec& t) { return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec; }

std::string checksum_key(const std::string& name) { return "linnet.checksum." + name; }

}  // namespace

std::string checkpoint_identity(const std::string& dir) {
  nlohmann::json files = nlohmann::json::array();
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == kPackedFileName || name.ends_with(".tmp")) continue;
    if (name == "config.json" || name == "model.safetensors.index.json" || name.ends_with(".safetensors"))
      paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  for (const fs::path& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) continue;
    const bool weights = p.extension() == ".safetensors";
    const std::string covered = weights ? header_bytes(p.string()) : read_text_file(p.string(), "checkpoint file");
    files.push_back({{"name", p.filename().string()},
                     {"device", static_cast<uint64_t>(st.st_dev)},
                     {"inode", static_cast<uint64_t>(st.st_ino)},
                     {"size", static_cast<int64_t>(st.st_size)},
                     {"mtime_ns", ns(st.st_mtim)},
                     {"ctime_ns", ns(st.st_ctim)},
                     {weights ? "header_xxh3" : "content_xxh3", checksum_hex(content_checksum(covered.data(), covered.size()))}});
  }
  return files.dump();
}

void write_packed_file(const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& matrices, DType t,
                       const std::string& format) {
  if (format.empty()) throw Error("linnet pack: this backend keeps its matrices row-major (nothing to pack)");
  SafetensorsWriter w((fs::path(dir) / kPackedFileName).string());
  w.set_metadata("linnet.format", format);
  w.set_metadata("linnet.dtype", dtype_name(t));
  w.set_metadata("linnet.source", checkpoint_identity(dir));
  for (const auto& [name, m] : matrices) {
    LINNET_CHECK(m.packed() && m.data() == m.storage()->data, "linnet pack: ", name, " is not a whole packed matrix");
    w.set_metadata("linnet.rows." + name, std::to_string(m.dim(0)));
    w.set_metadata(checksum_key(name), checksum_hex(content_checksum(m.storage()->data, m.storage()->bytes)));
    // Rows as the layout counts bytes (packed files hold dense matrices: a row is cols values).
    const int64_t padded = static_cast<int64_t>(m.storage()->bytes) / WeightLayout{}.data_bytes({1, m.dim(1)}, m.dtype());
    w.declare(name, m.dtype(), {padded, m.dim(1)});
  }
  for (const auto& [name, m] : matrices) w.write(name, m.storage()->data, m.storage()->bytes);
  w.finish();
}

namespace {
// Why a packed file as a whole does not fit this run ("" when it does).
std::string whole_file_problem(const SafetensorsFile& f, const std::string& dir, const std::string& format,
                               const std::string& dtype) {
  const auto& meta = f.metadata();
  auto get = [&](const std::string& k) { auto it = meta.find(k); return it == meta.end() ? std::string() : it->second; };
  if (!format.empty() && get("linnet.format") != format)
    return str("its layout is '", get("linnet.format"), "', this backend's '", format, "'");
  if (!dtype.empty() && get("linnet.dtype") != dtype) return str("it holds ", get("linnet.dtype"), ", this run ", dtype);
  if (get("linnet.source") != checkpoint_identity(dir))
    return "it was made from other files than the checkpoint's as they are now (another checkpoint, or these files "
           "changed since: device, inode, size, times or contents)";
  return "";
}

// Why matrix `name` of the file cannot be used for rows × cols = shape ("" when it can).
// cols < 0, dtype nullopt: as the file says.
std::string matrix_problem(const SafetensorsFile& f, const std::string& name, int64_t rows, int64_t cols,
                           std::optional<DType> dtype, double* seconds) {
  const auto& meta = f.metadata();
  const Tensor v = f.view(name);
  const auto r = meta.find("linnet.rows." + name);
  // The layout's whole panels of 32 rows: a shorter tensor would be read past its end.
  const int64_t panels_rows = (rows + 31) / 32 * 32;
  if (r == meta.end() || r->second != std::to_string(rows) || v.rank() != 2 || v.dim(0) != panels_rows ||
      (cols >= 0 && v.dim(1) != cols) || (dtype && v.dtype() != *dtype) || v.storage() == nullptr)
    return str("tensor '", name, "' is ", v.describe(), " for a matrix of ", rows, " rows", cols >= 0 ? " × " : "",
               cols >= 0 ? std::to_string(cols) : "", " (the file is damaged)");
  const auto sum = meta.find(checksum_key(name));
  if (sum == meta.end()) return str("tensor '", name, "' has no checksum (a file from an older linnet)");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string got = checksum_hex(content_checksum(v.data(), v.nbytes()));
  if (seconds) *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (got != sum->second)
    return str("tensor '", name, "' does not match its checksum (", got, ", stored ", sum->second, "): its bytes or its "
               "place in the file changed");
  return "";
}
}  // namespace

Tensor PackedFile::matrix(const std::string& name, const std::string& format, DType dtype, const Shape& shape) {
  const fs::path path = fs::path(dir_) / kPackedFileName;
  if (!opened_) {
    opened_ = true;
    if (!fs::exists(path)) return {};
    std::string why;
    try {
      file_ = std::make_unique<SafetensorsFile>(path.string());
      why = whole_file_problem(*file_, dir_, format, dtype_name(dtype));
    } catch (const Error& e) {
      why = e.what();
    }
    if (!why.empty()) {
      spdlog::warn("{}: not used ({}); packing at load instead. `linnet pack --checkpoint {}` writes it again.",
                   path.string(), why, dir_);
      return {};
    }
    valid_ = true;
  }
  if (!valid_ || !file_->has(name)) return {};
  const std::string why = matrix_problem(*file_, name, shape[0], shape[1], dtype, &verify_seconds_);
  if (!why.empty()) {
    ++refused_;
    spdlog::warn("{}: {}; this matrix is packed at load instead (`linnet pack --checkpoint {}` writes the file again)",
                 path.string(), why, dir_);
    return {};
  }
  const Tensor v = file_->view(name);
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

std::vector<std::string> verify_packed_file(const std::string& dir) {
  const fs::path path = fs::path(dir) / kPackedFileName;
  std::vector<std::string> problems;
  std::unique_ptr<SafetensorsFile> f;
  try {
    f = std::make_unique<SafetensorsFile>(path.string());
  } catch (const Error& e) {
    return {e.what()};
  }
  if (std::string why = whole_file_problem(*f, dir, "", ""); !why.empty()) problems.push_back(why);
  for (const std::string& name : f->names()) {
    const auto rows = f->metadata().find("linnet.rows." + name);
    int64_t r = -1;
    if (rows != f->metadata().end()) try {
        r = std::stoll(rows->second);
      } catch (const std::exception&) {
      }
    if (std::string why = matrix_problem(*f, name, r, -1, std::nullopt, nullptr); !why.empty()) problems.push_back(why);
  }
  return problems;
}

}  // namespace linnet
