#include "serve/metrics.h"

#include <cstdio>

namespace linnet::serve {

namespace {
std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}
}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

std::string Histogram::text(const std::string& name, const std::string& help) const {
  std::string s = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    s += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  s += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  s += name + "_sum " + num(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
  return s;
}

std::string metric(const std::string& name, const std::string& type, const std::string& help, double value) {
  return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + num(value) + "\n";
}

}  // namespace linnet::serve
