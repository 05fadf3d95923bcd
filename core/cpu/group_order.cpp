#include "core/cpu/group_order.h"

#include <cstddef>
#include <limits>

namespace linnet::cpu {

namespace {
int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
}  // namespace

GroupOrder group_order(const std::vector<int32_t>& g_idx, int64_t groups, int64_t group, int bits) {
  std::vector<std::vector<int32_t>> runs(static_cast<std::size_t>(groups));
  for (std::size_t c = 0; c < g_idx.size(); ++c) runs[static_cast<std::size_t>(g_idx[c])].push_back(static_cast<int32_t>(c));
  int64_t last = -1;  // the last group with columns: its run is not padded
  for (int64_t g = 0; g < groups; ++g)
    if (!runs[static_cast<std::size_t>(g)].empty()) last = g;
  // Columns in the new order for sub-groups of s.
  auto columns = [&](int64_t s) {
    int64_t k = 0;
    for (int64_t g = 0; g < groups; ++g) {
      const auto n = static_cast<int64_t>(runs[static_cast<std::size_t>(g)].size());
      k += g == last ? n : round_up(n, s);
    }
    return k;
  };
  GroupOrder order;
  order.sub = group;
  double best = std::numeric_limits<double>::max();
  for (int64_t s = group; s >= 1; s /= 2) {
    const int64_t k = columns(s);
    const double bytes = static_cast<double>(k) * bits / 8 + static_cast<double>((k + s - 1) / s) * 5;
    if (bytes < best) best = bytes, order.sub = s;
    if (s % 2 || s / 2 < 8) break;
  }
  for (int64_t g = 0; g < groups; ++g) {
    const auto& run = runs[static_cast<std::size_t>(g)];
    if (run.empty()) continue;
    const int64_t n = static_cast<int64_t>(run.size()), padded = g == last ? n : round_up(n, order.sub);
    order.gather.insert(order.gather.end(), run.begin(), run.end());
    order.gather.insert(order.gather.end(), static_cast<std::size_t>(padded - n), -1);
    for (int64_t j = 0; j < (padded + order.sub - 1) / order.sub; ++j) order.group_of.push_back(static_cast<int32_t>(g));
  }
  return order;
}

void apply_group_order(const GroupOrder& order, int64_t rows, int64_t cols, int64_t groups,
                       std::vector<uint8_t>& values, std::vector<float>& scales, std::vector<uint8_t>& zeros,
                       uint8_t pad) {
  const int64_t k = order.cols(), kb = static_cast<int64_t>(order.group_of.size());
  std::vector<uint8_t> v(static_cast<std::size_t>(rows * k)), z(zeros.empty() ? 0 : static_cast<std::size_t>(rows * kb));
  std::vector<float> s(static_cast<std::size_t>(rows * kb));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < kb; ++b) {
      const int64_t from = r * groups + order.group_of[static_cast<std::size_t>(b)];
      s[static_cast<std::size_t>(r * kb + b)] = scales[static_cast<std::size_t>(from)];
      if (!zeros.empty()) z[static_cast<std::size_t>(r * kb + b)] = zeros[static_cast<std::size_t>(from)];
    }
    for (int64_t j = 0; j < k; ++j) {
      const int32_t c = order.gather[static_cast<std::size_t>(j)];
      const int64_t b = j / order.sub;
      v[static_cast<std::size_t>(r * k + j)] = c >= 0 ? values[static_cast<std::size_t>(r * cols + c)]
                                        : zeros.empty() ? pad
                                                        : z[static_cast<std::size_t>(r * kb + b)];
    }
  }
  values = std::move(v);
  scales = std::move(s);
  zeros = std::move(z);
}

}  // namespace linnet::cpu
