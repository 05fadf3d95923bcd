#include "core/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "core/error.h"

namespace linnet {

namespace {
const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}
}  // namespace

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(str(path, ": cannot open ", what, ": ", errno == ENOENT ? "no such file" : std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(str(path, ": ", what, " is ", kind_of(st.st_mode), ", not a regular file"));
}

std::string read_text_file(const std::string& path, const std::string& what) {
  if (is_std_stream(path)) {
    std::string text;
    char buf[1 << 16];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) text.append(buf, n);
    if (std::ferror(stdin)) throw Error(str("stdin: read error in ", what, ": ", std::strerror(errno)));
    return text;
  }
  require_regular_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str(path, ": cannot open ", what, ": ", std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(str(path, ": read error in ", what));
  return ss.str();
}

namespace {
template <class Json>
Json parse_limited(const std::string& text, const std::string& source) {
  typename Json::parser_callback_t limit = [&](int depth, typename Json::parse_event_t, Json&) {
    if (depth > kMaxJsonDepth)
      throw Error(str(source, ": JSON nested deeper than ", kMaxJsonDepth, " levels"));
    return true;
  };
  try {
    return Json::parse(text, limit);
  } catch (const typename Json::exception& e) {
    throw Error(str(source, ": malformed JSON: ", e.what()));
  }
}
}  // namespace

nlohmann::json parse_json(const std::string& text, const std::string& source) {
  return parse_limited<nlohmann::json>(text, source);
}

namespace {

// Builds an ordered_json in one pass. nlohmann's own parser finds each key by a linear search
// of its object (ordered_map), so an object of n keys costs n² (60,000 keys: 5 s); here each
// open object has a hash index of its keys. A repeated key keeps its first place and takes
// the last value, as nlohmann's parser and Python's json.loads do.
class OrderedJsonBuilder : public nlohmann::json_sax<nlohmann::ordered_json> {
 public:
  using Json = nlohmann::ordered_json;
  explicit OrderedJsonBuilder(const std::string& source) : source_(source) {}
  Json result;

  bool null() override { return add(Json(nullptr)); }
  bool boolean(bool b) override { return add(Json(b)); }
  bool number_integer(number_integer_t n) override { return add(Json(n)); }
  bool number_unsigned(number_unsigned_t n) override { return add(Json(n)); }
  bool number_float(number_float_t n, const string_t&) override { return add(Json(n)); }
  bool string(string_t& s) override { return add(Json(std::move(s))); }
  bool binary(binary_t& b) override { return add(Json::binary(std::move(b))); }
  bool start_object(std::size_t) override { return open(Json::object()); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(Json::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw Error(str(source_, ": malformed JSON: ", e.what()));
  }

 private:
  struct Open {
    Json* value;
    std::unordered_map<std::string, std::size_t> keys;  // an object's keys → their place
  };
  const std::string& source_;
  std::vector<Open> open_;
  std::string key_;

  // The depth nlohmann's parse callback sees for the next value (parse_limited's rule).
  void check_depth() const {
    if (open_.size() > std::size_t(kMaxJsonDepth))
      throw Error(str(source_, ": JSON nested deeper than ", kMaxJsonDepth, " levels"));
  }
  Json* place(Json&& v) {
    if (open_.empty()) {
      result = std::move(v);
      return &result;
    }
    Open& top = open_.back();
    if (top.value->is_array()) {
      top.value->push_back(std::move(v));
      return &top.value->back();
    }
    auto& object = top.value->get_ref<Json::object_t&>();
    auto [at, fresh] = top.keys.try_emplace(key_, object.size());
    if (!fresh) return &((object.begin() + std::ptrdiff_t(at->second))->second = std::move(v));
    object.emplace_back(key_, std::move(v));  // the vector's own append: no search
    return &object.back().second;
  }
  bool add(Json&& v) {
    check_depth();
    place(std::move(v));
    return true;
  }
  bool open(Json&& container) {
    check_depth();
    open_.push_back({place(std::move(container)), {}});
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }
};

}  // namespace

nlohmann::ordered_json parse_ordered_json(const std::string& text, const std::string& source) {
  OrderedJsonBuilder builder(source);
  try {
    nlohmann::ordered_json::sax_parse(text, &builder);
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error(str(source, ": malformed JSON: ", e.what()));
  }
  return std::move(builder.result);
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  return parse_json(read_text_file(path, what), path);
}

// ---- writing ----

OutputFile::OutputFile(std::string path, const char* mode, std::string what)
    : path_(std::move(path)), what_(std::move(what)) {
  if (is_std_stream(path_)) {
    const int fd = ::dup(STDOUT_FILENO);
    file_ = fd < 0 ? nullptr : ::fdopen(fd, "w");
    if (!file_) {
      const int err = errno;
      if (fd >= 0) ::close(fd);
      fail("cannot open", err);
    }
    return;
  }
  file_ = std::fopen(path_.c_str(), mode);
  if (!file_) fail("cannot open", errno);
}

OutputFile::~OutputFile() {
  if (file_) std::fclose(file_);
}

void OutputFile::fail(const char* doing, int err) {
  throw Error(str(is_std_stream(path_) ? "stdout" : path_, ": ", doing, " ", what_, ": ", std::strerror(err), " (errno ",
                  err, ")"));
}

void OutputFile::write(std::string_view bytes) {
  if (!file_) fail("write after closing", EBADF);
  errno = 0;
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size())
    fail("cannot write", errno ? errno : EIO);
}

void OutputFile::flush() {
  if (!file_) return;
  errno = 0;
  if (std::fflush(file_) != 0) fail("cannot write", errno ? errno : EIO);
}

void OutputFile::close() {
  if (!file_) return;
  flush();
  // fsync: the data is on the disk when we say it is written. Pipes, terminals and devices
  // such as /dev/null cannot be synced (EINVAL, ENOTSUP, EROFS): nothing to wait for there.
  if (::fsync(::fileno(file_)) != 0 && errno != EINVAL && errno != ENOTSUP && errno != EROFS) {
    const int err = errno;
    std::fclose(std::exchange(file_, nullptr));
    fail("cannot write", err);
  }
  if (std::fclose(std::exchange(file_, nullptr)) != 0) fail("cannot close", errno);
}

void write_text_file(const std::string& path, std::string_view content, const std::string& what) {
  OutputFile f(path, "w", what);
  f.write(content);
  f.close();
}

}  // namespace linnet
