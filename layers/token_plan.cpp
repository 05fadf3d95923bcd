#include "layers/token_plan.h"

#include <algorithm>

namespace linnet {

TokenPlan TokenPlan::rows_of(const std::vector<int32_t>& rows) const {
  auto mine = [&](int32_t row) { return std::binary_search(rows.begin(), rows.end(), row); };
  TokenPlan p;
  for (size_t i = 0; i < size(); ++i) {
    if (!mine(cache_row[i])) continue;
    p.add(ids[i], positions[i], run_start[i], cache_row[i], slots[i], state_row[i]);
    if (!state_keep.empty()) p.state_keep.push_back(state_keep[i]);
    p.source.push_back(static_cast<int32_t>(i));
  }
  // A restore goes with the tokens of its state row (a row's state slot, not its cache row).
  for (const StateRestore& r : state_restores)
    if (std::find(p.state_row.begin(), p.state_row.end(), r.row) != p.state_row.end()) p.state_restores.push_back(r);
  return p;
}

int32_t TokenPlan::index_of(int32_t source_index) const {
  const auto it = std::lower_bound(source.begin(), source.end(), source_index);
  return it != source.end() && *it == source_index ? static_cast<int32_t>(it - source.begin()) : -1;
}

}  // namespace linnet
