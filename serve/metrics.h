// Prometheus text exposition (format 0.0.4) for `linnet serve`'s /metrics: counters,
// gauges and histograms, written by hand because the format is a few lines of text.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace linnet::serve {

// Labels as the format writes them inside braces: `model_name="tiny"` (values escaped).
std::string labels(const std::vector<std::pair<std::string, std::string>>& pairs);

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // `name`_bucket{…, le=…} (cumulative), _sum and _count, with HELP and TYPE lines; `label_text`
  // (from labels()) on every sample.
  std::string text(const std::string& name, const std::string& help, const std::string& label_text = "") const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // the last: above every bound
  double sum_ = 0;
  uint64_t count_ = 0;
};

// "# HELP name help\n# TYPE name type\n" and one line per sample: `name{labels} value`.
std::string family(const std::string& name, const std::string& type, const std::string& help,
                   const std::vector<std::pair<std::string, double>>& samples);
// One sample.
std::string metric(const std::string& name, const std::string& type, const std::string& help, double value,
                   const std::string& label_text = "");

}  // namespace linnet::serve
