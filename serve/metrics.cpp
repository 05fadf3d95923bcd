#include "serve/metrics.h"

#include <cmath>
#include <cstdio>

namespace linnet::serve {

namespace {
std::string num(double v) {
  char b[64];
  // Counts written whole (%g would round a counter past 10 digits).
  if (std::nearbyint(v) == v && std::fabs(v) < 9007199254740992.0) std::snprintf(b, sizeof b, "%.0f", v);
  else std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

std::string braced(const std::string& label_text) { return label_text.empty() ? "" : "{" + label_text + "}"; }

std::string head(const std::string& name, const std::string& type, const std::string& help) {
  return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}
}  // namespace

std::string labels(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::string s;
  for (const auto& [name, value] : pairs) {
    if (!s.empty()) s += ",";
    s += name + "=\"";
    for (char c : value) {  // the format's three escapes
      if (c == '\\') s += "\\\\";
      else if (c == '"') s += "\\\"";
      else if (c == '\n') s += "\\n";
      else s += c;
    }
    s += "\"";
  }
  return s;
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

std::string Histogram::text(const std::string& name, const std::string& help, const std::string& label_text) const {
  std::string s = head(name, "histogram", help);
  const std::string before_le = label_text.empty() ? "" : label_text + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    s += name + "_bucket{" + before_le + "le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  s += name + "_bucket{" + before_le + "le=\"+Inf\"} " + std::to_string(count_) + "\n";
  s += name + "_sum" + braced(label_text) + " " + num(sum_) + "\n";
  s += name + "_count" + braced(label_text) + " " + std::to_string(count_) + "\n";
  return s;
}

std::string family(const std::string& name, const std::string& type, const std::string& help,
                   const std::vector<std::pair<std::string, double>>& samples) {
  std::string s = head(name, type, help);
  for (const auto& [label_text, value] : samples) s += name + braced(label_text) + " " + num(value) + "\n";
  return s;
}

std::string metric(const std::string& name, const std::string& type, const std::string& help, double value,
                   const std::string& label_text) {
  return family(name, type, help, {{label_text, value}});
}

}  // namespace linnet::serve
