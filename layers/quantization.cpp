#include "layers/quantization.h"

#include <regex>

#include "core/error.h"

namespace linnet {

namespace {
// A pattern matches from the start to a module boundary: the match ends at the name's end,
// before a '.', or just after one.
bool matches_at_boundary(const std::string& pattern, const std::string& name) {
  std::regex re;
  try {
    re = std::regex(pattern);
  } catch (const std::regex_error&) {
    return name.rfind(pattern, 0) == 0 &&
           (name.size() == pattern.size() || name[pattern.size()] == '.' || pattern.back() == '.');
  }
  for (size_t len = name.size() + 1; len-- > 0;) {
    const bool boundary = len == name.size() || name[len] == '.' || (len > 0 && name[len - 1] == '.');
    if (boundary && std::regex_match(name.begin(), name.begin() + static_cast<std::ptrdiff_t>(len), re)) return true;
  }
  return false;
}
}  // namespace

bool Quantization::converts(const std::string& module) const {
  if (module == "lm_head") return false;
  for (const std::string& p : not_converted) {
    if (p.empty()) continue;
    if (module.size() >= p.size() && module.compare(module.size() - p.size(), p.size(), p) == 0) return false;
    if (matches_at_boundary(p, module)) return false;
  }
  return true;
}

std::string Quantization::describe() const {
  std::string s = matrices.describe();
  if (!not_converted.empty()) {
    s += " (not converted:";
    for (const auto& p : not_converted) s += " " + p;
    s += ")";
  }
  return s;
}

}  // namespace linnet
