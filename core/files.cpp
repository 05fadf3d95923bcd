#include "core/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
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

nlohmann::ordered_json parse_ordered_json(const std::string& text, const std::string& source) {
  return parse_limited<nlohmann::ordered_json>(text, source);
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  return parse_json(read_text_file(path, what), path);
}

// ---- writing ----

OutputFile::OutputFile(std::string path, const char* mode, std::string what)
    : path_(std::move(path)), what_(std::move(what)) {
  file_ = std::fopen(path_.c_str(), mode);
  if (!file_) fail("cannot open", errno);
}

OutputFile::~OutputFile() {
  if (file_) std::fclose(file_);
}

void OutputFile::fail(const char* doing, int err) {
  throw Error(str(path_, ": ", doing, " ", what_, ": ", std::strerror(err), " (errno ", err, ")"));
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
