#include "core/error.h"

namespace linnet::detail {

void check_failed(const char* cond, const char* file, int line, const std::string& msg) {
  throw Error(str(msg.empty() ? "internal check failed" : msg, " (", cond, " at ", file, ":", line, ")"));
}

}  // namespace linnet::detail
