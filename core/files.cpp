#include "core/files.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

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

nlohmann::json parse_json(const std::string& text, const std::string& source) {
  using json = nlohmann::json;
  json::parser_callback_t limit = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth)
      throw Error(str(source, ": JSON nested deeper than ", kMaxJsonDepth, " levels"));
    return true;
  };
  try {
    return json::parse(text, limit);
  } catch (const json::exception& e) {
    throw Error(str(source, ": malformed JSON: ", e.what()));
  }
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  return parse_json(read_text_file(path, what), path);
}

}  // namespace linnet
