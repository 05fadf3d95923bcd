// linnet::Error and the checks that throw it. Library code never exits or aborts:
// every failure becomes an Error whose message names what was wrong.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace linnet {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// str(a, b, c) concatenates anything that streams; usable from .cu files too (no fmt).
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

namespace detail {
[[noreturn]] void check_failed(const char* cond, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace linnet

// Internal invariant: reports the condition with file and line.
#define LINNET_CHECK(cond, ...)                                                            \
  do {                                                                                     \
    if (!(cond)) ::linnet::detail::check_failed(#cond, __FILE__, __LINE__,                 \
                                                ::linnet::str("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
