// Stop strings over a completion's text as it is decoded (generate and serve alike).
#pragma once
#include <string>
#include <vector>

namespace linnet::cli {

// `text` grew from `before` bytes; cuts it where a stop string first appears (looking only
// where the new text could complete one). Returns whether it was cut.
inline bool cut_at_stop(std::string& text, size_t before, const std::vector<std::string>& stop) {
  bool cut = false;
  for (const auto& s : stop) {
    const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    const size_t at = text.find(s, from);
    if (at != std::string::npos) {
      text.resize(at);
      cut = true;
    }
  }
  return cut;
}

}  // namespace linnet::cli
