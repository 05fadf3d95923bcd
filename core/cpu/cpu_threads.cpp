#include "core/cpu/cpu_threads.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace linnet {

namespace {
constexpr const char* kChosen = "LINNET_OMP_SPIN_CHOSEN";
constexpr const char* kSpin = "1000";

int allowed_cores() {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

// How waiting threads wait, as the log says it.
std::string wait_text() {
  if (std::getenv(kChosen)) return str("waiting threads spin ", kSpin, " rounds, then sleep: GOMP_SPINCOUNT=", kSpin);
  std::string s;
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"})
    if (const char* v = std::getenv(name)) s += str(s.empty() ? "" : ", ", name, "=", v);
  return s.empty() ? "waiting threads spin as OpenMP's default" : s;
}

const char* cores(int n) { return n == 1 ? "core" : "cores"; }
}  // namespace

bool choose_omp_spin() {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT") || allowed_cores() < 2) return false;
  ::setenv("GOMP_SPINCOUNT", kSpin, 1);
  ::setenv(kChosen, "1", 1);
  return true;
}

void forget_omp_spin() {
  if (!std::getenv(kChosen)) return;
  ::unsetenv("GOMP_SPINCOUNT");
  ::unsetenv(kChosen);
}

CpuThreads set_cpu_threads(int requested, int local_ranks) {
  CpuThreads t;
  if (requested > 0) {
    omp_set_num_threads(requested);
    t.why = str("--threads ", requested);
  } else if (const char* v = std::getenv("OMP_NUM_THREADS")) {
    t.why = str("OMP_NUM_THREADS=", v);
  } else {
    const int allowed = allowed_cores();
    const int node = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (local_ranks > 1 && node / local_ranks < allowed) {
      omp_set_num_threads(std::max(1, node / local_ranks));
      t.why = str("the node's ", node, " ", cores(node), " shared by its ", local_ranks, " ranks");
    } else {
      omp_set_num_threads(allowed);
      t.why = str("the ", allowed, " ", cores(allowed), " this ", local_ranks > 1 ? "rank" : "process", " may run on");
    }
  }
  t.threads = omp_get_max_threads();
  if (t.threads > 1) t.why += "; " + wait_text();
  return t;
}

}  // namespace linnet
