#include "core/profiling_backend.h"

#include <algorithm>

namespace linnet {

template <class F>
void ProfilingBackend::timed(const char* op, F&& f) {
  if (!armed_) return f();
  Entry& e = ops_[op];
  if (!e.timer) e.timer = inner_.make_timer();
  ++e.calls;
  e.timer->start();
  f();
  e.timer->stop();
}

std::vector<ProfilingBackend::OpTime> ProfilingBackend::report() {
  std::vector<OpTime> out;
  for (auto& [op, e] : ops_) out.push_back({op, e.calls, e.timer->seconds()});
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return out;
}

void ProfilingBackend::reset() { ops_.clear(); }

#define LINNET_OP(name, label, params, args) \
  void ProfilingBackend::name params {            \
    timed(label, [&] { inner_.name args; });      \
  }
#include "core/backend_op_list.h"
#undef LINNET_OP

}  // namespace linnet
