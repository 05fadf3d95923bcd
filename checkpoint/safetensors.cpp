// SafetensorsFile: maps a safetensors file and validates its header up front, so that every
// later view/read is a plain in-bounds copy. The header is hostile input: each size and offset
// is checked for overflow before it is used.
#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

namespace linnet {

namespace {
// The whole pages inside [p, p + bytes) of a read-only mapping, given back (still valid).
void drop_mapped_pages(const void* p, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(p), e = b + bytes;
  const uintptr_t first = (b + page - 1) / page * page, last = e / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}
}  // namespace
namespace {

using json = nlohmann::json;
static_assert(sizeof(size_t) == 8, "safetensors offsets are 64-bit");

// The reference implementation refuses headers above 100 MB; so do we, which also bounds
// the memory a hostile length can make us spend on JSON.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
// A valid header nests three deep (header → entry → shape); allow some slack, refuse towers.
constexpr int kMaxJsonDepth = 8;

// Closes the descriptor on every path out of the constructor.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// A JSON value for an error message, cut short: hostile headers can hold megabytes.
std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

DType dtype_from_safetensors(const std::string& path, const std::string& name, const std::string& s) {
  if (s == "BF16") return DType::bf16;
  if (s == "F16") return DType::f16;
  if (s == "F32") return DType::f32;
  if (s == "I32") return DType::i32;
  if (s == "I64") return DType::i64;
  if (s == "F8_E4M3") return DType::f8_e4m3;
  if (s == "I8") return DType::i8;
  if (s == "U8") return DType::u8;
  if (s == "F8_E8M0") return DType::f8_e8m0;
  throw Error(str(path, ": tensor '", name, "' has unsupported dtype '", s.size() > 40 ? s.substr(0, 37) + "..." : s,
                  "' (linnet reads BF16, F16, F32, I32, I64, F8_E4M3, I8, U8, F8_E8M0)"));
}

// A non-negative JSON integer that fits in int64 (so it is also a valid shape dim and size_t).
uint64_t json_count(const std::string& path, const std::string& name, const char* field, const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(str(path, ": tensor '", name, "': ", field, " value ", u, " is too large"));
    return u;
  }
  if (v.is_number_integer()) throw Error(str(path, ": tensor '", name, "': ", field, " value ", brief(v), " is negative"));
  throw Error(str(path, ": tensor '", name, "': ", field, " holds ", brief(v), ", not a non-negative integer"));
}

// Parses the header text, refusing deep nesting and duplicate keys (nlohmann would silently
// keep the last of two same-named tensors).
json parse_header(const std::string& path, const char* begin, const char* end) {
  std::vector<std::set<std::string>> open_objects;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& v) {
    if (depth > kMaxJsonDepth) throw Error(str(path, ": safetensors header nests deeper than ", kMaxJsonDepth));
    if (ev == json::parse_event_t::object_start) open_objects.emplace_back();
    if (ev == json::parse_event_t::object_end) open_objects.pop_back();
    if (ev == json::parse_event_t::key && !open_objects.back().insert(v.get<std::string>()).second)
      throw Error(str(path, ": safetensors header has the key '", v.get<std::string>(), "' twice"));
    return true;
  };
  try {
    return json::parse(begin, end, cb);
  } catch (const json::exception& e) {
    throw Error(str(path, ": malformed safetensors header JSON: ", e.what()));
  }
}

const json& field(const std::string& path, const std::string& name, const json& entry, const char* key) {
  auto it = entry.find(key);
  if (it == entry.end()) throw Error(str(path, ": tensor '", name, "': header entry has no '", key, "'"));
  return *it;
}

TensorInfo parse_entry(const std::string& path, const std::string& name, const json& entry, size_t data_bytes) {
  if (!entry.is_object()) throw Error(str(path, ": tensor '", name, "': header entry is not a JSON object"));
  TensorInfo ti;
  ti.name = name;
  const json& dt = field(path, name, entry, "dtype");
  if (!dt.is_string()) throw Error(str(path, ": tensor '", name, "': dtype ", brief(dt), " is not a string"));
  ti.dtype = dtype_from_safetensors(path, name, dt.get<std::string>());

  const json& shape = field(path, name, entry, "shape");
  if (!shape.is_array()) throw Error(str(path, ": tensor '", name, "': shape ", brief(shape), " is not an array"));
  std::vector<int64_t> dims;
  // The running product must stay in range at every step: Shape::numel multiplies in order.
  uint64_t numel = 1;
  for (const json& d : shape) {
    const uint64_t n = json_count(path, name, "shape", d);
    dims.push_back(static_cast<int64_t>(n));
    if (__builtin_mul_overflow(numel, n, &numel) || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(str(path, ": tensor '", name, "': shape ", brief(shape), " has too many elements"));
  }
  ti.shape = Shape(std::move(dims));
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(ti.dtype)), &nbytes))
    throw Error(str(path, ": tensor '", name, "': shape ", brief(shape), " is too large"));

  const json& off = field(path, name, entry, "data_offsets");
  if (!off.is_array() || off.size() != 2)
    throw Error(str(path, ": tensor '", name, "': data_offsets ", brief(off), " is not [begin, end]"));
  ti.begin = json_count(path, name, "data_offsets", off[0]);
  ti.end = json_count(path, name, "data_offsets", off[1]);
  if (ti.begin > ti.end)
    throw Error(str(path, ": tensor '", name, "': data_offsets [", ti.begin, ", ", ti.end, "] begin after end"));
  if (ti.end > data_bytes)
    throw Error(str(path, ": tensor '", name, "': data_offsets [", ti.begin, ", ", ti.end,
                    "] run past the end of the data section (", data_bytes, " bytes; file truncated?)"));
  if (ti.end - ti.begin != nbytes)
    throw Error(str(path, ": tensor '", name, "': shape ", ti.shape.to_string(), " of ", dtype_name(ti.dtype),
                    " needs ", nbytes, " bytes but data_offsets [", ti.begin, ", ", ti.end, "] hold ",
                    ti.end - ti.begin));
  return ti;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& m) {
  if (!m.is_object()) throw Error(str(path, ": __metadata__ is not a JSON object"));
  std::map<std::string, std::string> out;
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it.value().is_string())
      throw Error(str(path, ": __metadata__ value for '", it.key(), "' is not a string"));
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::f32: return "F32";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::f8_e4m3: return "F8_E4M3";
    case DType::i8: return "I8";
    case DType::u8: return "U8";
    case DType::f8_e8m0: return "F8_E8M0";
  }
  return "?";
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO would otherwise wait forever for a writer; fstat then refuses it.
  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (fd.fd < 0) throw Error(str(path, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) throw Error(str(path, ": cannot stat: ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw Error(str(path, ": not a regular file (", S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket", ")"));
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) throw Error(str(path, ": truncated safetensors file (", size, " bytes, shorter than the 8-byte header length)"));

  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (p == MAP_FAILED) throw Error(str(path, ": cannot mmap ", size, " bytes: ", std::strerror(errno)));
  // From here the Storage owns the mapping, so every throw below unmaps it.
  mapping_ = std::make_shared<Storage>();
  mapping_->data = p;
  mapping_->bytes = size;
  mapping_->release = [size](void* q) { ::munmap(q, size); };
  mapping_->drop_pages = [](const void* q, size_t bytes) { drop_mapped_pages(q, bytes); };

  const auto* bytes = static_cast<const unsigned char*>(p);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];  // little-endian
  if (header_len > size - 8)
    throw Error(str(path, ": header length ", header_len, " runs past the end of the file (", size,
                    " bytes; truncated or not a safetensors file)"));
  if (header_len > kMaxHeaderBytes) throw Error(str(path, ": header length ", header_len, " exceeds 100 MB"));
  data_start_ = 8 + header_len;
  const size_t data_bytes = size - data_start_;

  const char* text = static_cast<const char*>(p) + 8;
  const json header = parse_header(path, text, text + header_len);
  if (!header.is_object()) throw Error(str(path, ": safetensors header is not a JSON object"));

  std::vector<const TensorInfo*> by_offset;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      metadata_ = parse_metadata(path, it.value());
      continue;
    }
    TensorInfo ti = parse_entry(path, it.key(), it.value(), data_bytes);
    by_offset.push_back(&infos_.emplace(it.key(), std::move(ti)).first->second);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
  });
  // Sorted by begin, two tensors share bytes iff one begins before the furthest end so far.
  // Empty tensors hold no bytes and may sit anywhere.
  const TensorInfo* furthest = nullptr;
  for (const TensorInfo* ti : by_offset) {
    order_.push_back(ti->name);
    if (ti->begin == ti->end) continue;
    if (furthest && ti->begin < furthest->end)
      throw Error(str(path, ": tensors '", furthest->name, "' [", furthest->begin, ", ", furthest->end, ") and '",
                      ti->name, "' [", ti->begin, ", ", ti->end, ") overlap"));
    if (!furthest || ti->end > furthest->end) furthest = ti;
  }
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  if (it == infos_.end()) throw Error(str(path_, ": no tensor '", name, "'"));
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const { return order_; }

const char* SafetensorsFile::bytes_of(const TensorInfo& ti) const {
  return static_cast<const char*>(mapping_->data) + data_start_ + ti.begin;
}

Tensor SafetensorsFile::view(const std::string& name) const {
  const TensorInfo& ti = info(name);
  const size_t offset = data_start_ + ti.begin;
  // Typed access through a misaligned pointer is undefined behaviour; such files are legal
  // but rare (our writer and the reference one align), so they pay for a copy.
  if (offset % dtype_size(ti.dtype) != 0) return read(name);
  return Tensor(mapping_, offset, ti.shape, ti.dtype);
}

Tensor SafetensorsFile::read(const std::string& name) const {
  const TensorInfo& ti = info(name);
  Tensor t = Tensor::empty(ti.shape, ti.dtype);
  if (ti.end > ti.begin) std::memcpy(t.data(), bytes_of(ti), ti.end - ti.begin);
  drop_mapped_pages(bytes_of(ti), ti.end - ti.begin);  // copied: the file's pages can go
  return t;
}

Tensor SafetensorsFile::read_rows(const std::string& name, int64_t begin, int64_t end) const {
  const TensorInfo& ti = info(name);
  if (ti.shape.rank() < 1) throw Error(str(path_, ": tensor '", name, "': read_rows needs rank >= 1, shape is []"));
  const int64_t rows = ti.shape[0];
  if (begin < 0 || begin > end || end > rows)
    throw Error(str(path_, ": tensor '", name, "': rows [", begin, ", ", end, ") are outside [0, ", rows, ")"));
  Shape s = ti.shape;
  s[0] = end - begin;
  Tensor t = Tensor::empty(s, ti.dtype);
  // rows > 0 here unless begin == end == 0, where nothing is copied.
  const size_t row_bytes = rows ? (ti.end - ti.begin) / static_cast<size_t>(rows) : 0;
  if (t.nbytes()) std::memcpy(t.data(), bytes_of(ti) + static_cast<size_t>(begin) * row_bytes, t.nbytes());
  drop_mapped_pages(bytes_of(ti) + static_cast<size_t>(begin) * row_bytes, t.nbytes());
  return t;
}

Tensor SafetensorsFile::read_block(const std::string& name, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                   int64_t view_cols) const {
  const TensorInfo& ti = info(name);
  if (ti.shape.rank() < 2)
    throw Error(str(path_, ": tensor '", name, "': read_block needs rank >= 2, shape is ", ti.shape.to_string()));
  int64_t trailing = 1;  // the view's columns must be whole trailing dimensions
  for (size_t d = ti.shape.rank(); d-- > 1 && trailing < view_cols;) trailing *= ti.shape[d];
  if (view_cols > 0 && trailing != view_cols)
    throw Error(str(path_, ": tensor '", name, "' ", ti.shape.to_string(), " cannot be seen as 2-D with ", view_cols,
                    " columns"));
  const int64_t cols = view_cols > 0 ? view_cols : ti.shape[ti.shape.rank() - 1], rows = cols ? ti.shape.numel() / cols : 0;
  if (r0 < 0 || r0 > r1 || r1 > rows || c0 < 0 || c0 > c1 || c1 > cols)
    throw Error(str(path_, ": tensor '", name, "': rows [", r0, ", ", r1, ") and columns [", c0, ", ", c1,
                    ") are outside its ", rows, " × ", cols, " (as 2-D)"));
  Tensor t = Tensor::empty({r1 - r0, c1 - c0}, ti.dtype);
  const size_t es = dtype_size(ti.dtype), src_row = static_cast<size_t>(cols) * es,
               dst_row = static_cast<size_t>(c1 - c0) * es;
  if (t.nbytes() == 0) return t;
  const char* src = bytes_of(ti) + static_cast<size_t>(r0) * src_row + static_cast<size_t>(c0) * es;
  char* dst = static_cast<char*>(t.data());
  for (int64_t r = 0; r < r1 - r0; ++r)
    std::memcpy(dst + static_cast<size_t>(r) * dst_row, src + static_cast<size_t>(r) * src_row, dst_row);
  drop_mapped_pages(bytes_of(ti) + static_cast<size_t>(r0) * src_row, static_cast<size_t>(r1 - r0) * src_row);
  return t;
}

Tensor SafetensorsFile::read_cols(const std::string& name, int64_t begin, int64_t end) const {
  const TensorInfo& ti = info(name);
  if (ti.shape.rank() != 2)
    throw Error(str(path_, ": tensor '", name, "': read_cols needs a 2-D tensor, shape is ", ti.shape.to_string()));
  const int64_t rows = ti.shape[0], cols = ti.shape[1];
  if (begin < 0 || begin > end || end > cols)
    throw Error(str(path_, ": tensor '", name, "': columns [", begin, ", ", end, ") are outside [0, ", cols, ")"));
  Tensor t = Tensor::empty({rows, end - begin}, ti.dtype);
  const size_t es = dtype_size(ti.dtype);
  const size_t src_row = static_cast<size_t>(cols) * es, dst_row = static_cast<size_t>(end - begin) * es;
  if (dst_row == 0) return t;
  const char* src = bytes_of(ti) + static_cast<size_t>(begin) * es;
  char* dst = static_cast<char*>(t.data());
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + static_cast<size_t>(r) * dst_row, src + static_cast<size_t>(r) * src_row, dst_row);
  drop_mapped_pages(bytes_of(ti), ti.end - ti.begin);  // every page was touched
  return t;
}

}  // namespace linnet
