// How many OpenMP threads the CPU backend runs on, and how they wait for work: the rules in one
// place (docs/cli.md, "Threads"; measured in docs/benchmarks.md, "Busy nodes").
#pragma once
#include <string>

namespace linnet {

// Waiting OpenMP threads spin about 1,000 rounds (25 µs on a Zen 3), then sleep, unless the user
// said how they wait (OMP_WAIT_POLICY or GOMP_SPINCOUNT). libgomp's default, 300,000 rounds
// (7.5 ms there), made runs on a node whose cores other processes held 2–10× slower than one
// thread; sleeping at once (OMP_WAIT_POLICY=passive) cost 20% on an idle one; 1,000 rounds,
// libgomp's own count for threads that outnumber the cores, costs neither (docs/benchmarks.md,
// "Busy nodes"). libgomp reads the variable once, as it loads, before main: this sets it (and
// LINNET_OMP_SPIN_CHOSEN, so that the log can say who chose) for the launcher to start itself
// again with, when the process may run on more than one core. Returns whether it set them;
// forget_omp_spin() undoes that when the new start fails.
bool choose_omp_spin();
void forget_omp_spin();

struct CpuThreads {
  int threads = 1;
  std::string why;  // "the 2 cores this process may run on; waiting threads spin 1000 rounds, then sleep"
};

// Sets this rank's OpenMP thread count and says why: `requested` (--threads) when > 0, else
// OMP_NUM_THREADS when set (libgomp has applied it), else the cores this process may run on
// (its affinity mask), shared among the node's `local_ranks` (ranks of one node not bound to
// cores of their own would otherwise each take them all); with more than one thread, how they
// wait. The automatic count of a rank alone on its node then follows the free cores (below).
CpuThreads set_cpu_threads(int requested, int local_ranks);

// Once a second at most, on the thread set_cpu_threads ran on (a no-op elsewhere, and when the
// count was given): the thread count becomes the cores of the affinity mask that other
// processes left free over the last second — their busy time (/proc/stat) less this
// process's own — at least 1. Threads that outnumber the free cores wait at every barrier for
// one that is off its core: with one of two cores busy, one thread was 15–20% faster than two
// (docs/benchmarks.md, "Busy nodes"). A new count must be seen twice running before it is
// taken (and logged), so that a passing burst changes nothing. The thread count changes no
// result (docs/numerics.md). The CPU backend calls this as each model call starts.
void follow_free_cores();

}  // namespace linnet
