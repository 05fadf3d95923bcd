#include "core/cpu/cpu_threads.h"

#include <omp.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

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

// The busy time of the CPUs in `set` (/proc/stat's user, nice, system, irq, softirq and steal),
// in seconds; < 0 when it cannot be read.
double busy_seconds(const cpu_set_t& set) {
  std::ifstream in("/proc/stat");
  std::string line;
  double ticks = 0;
  bool any = false;
  while (std::getline(in, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    fields >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
    if (!fields || cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set)) continue;
    ticks += static_cast<double>(user + nice + system + irq + softirq + steal);
    any = true;
  }
  return any ? ticks / static_cast<double>(::sysconf(_SC_CLK_TCK)) : -1;
}

double own_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// follow_free_cores()'s state, on the thread whose OpenMP count it sets.
struct FreeCores {
  bool on = false;
  cpu_set_t set{};
  int most = 1, threads = 1, seen = 0, seen_twice = 0;  // seen: the last estimate
  std::chrono::steady_clock::time_point at;
  double busy = 0, own = 0;
};
thread_local FreeCores free_cores;

void start_following(int most) {
  FreeCores& f = free_cores;
  f = FreeCores{};
  if (most < 2 || sched_getaffinity(0, sizeof f.set, &f.set) != 0) return;
  f.busy = busy_seconds(f.set);
  if (f.busy < 0) return;
  f.on = true;
  f.most = f.threads = f.seen = most;
  f.at = std::chrono::steady_clock::now();
  f.own = own_cpu_seconds();
}
}  // namespace

void follow_free_cores() {
  FreeCores& f = free_cores;
  if (!f.on) return;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - f.at).count();
  if (seconds < 1) return;
  const double busy = busy_seconds(f.set), own = own_cpu_seconds();
  if (busy < 0) return;
  // Cores the others kept busy; a core counts as free when they used less than half of it.
  const double others = std::max(0.0, (busy - f.busy) - (own - f.own)) / seconds;
  const int estimate = std::clamp(static_cast<int>(std::lround(f.most - others)), 1, f.most);
  f.at = now, f.busy = busy, f.own = own;
  const bool twice = estimate == f.seen;
  f.seen = estimate;
  if (!twice || estimate == f.threads) return;
  spdlog::info("CPU threads: {} → {} (other processes kept {:.1f} of the {} cores busy; --threads N fixes the count)",
               f.threads, estimate, others, f.most);
  f.threads = estimate;
  omp_set_num_threads(estimate);
}

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
  free_cores = FreeCores{};
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
      if (local_ranks == 1 && allowed > 1) {
        start_following(allowed);
        if (free_cores.on) t.why += ", fewer while other processes keep some busy";
      }
    }
  }
  t.threads = omp_get_max_threads();
  if (t.threads > 1) t.why += "; " + wait_text();
  return t;
}

}  // namespace linnet
