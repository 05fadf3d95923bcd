// linnet devices: what this machine offers linnet — the CPU backend's kernels and threads, the
// CUDA devices or why there are none. The first thing scripts/gpu-check runs.
#include <omp.h>

#include <cstdio>

#include "core/backend.h"
#include "core/cpu/blas_kernels.h"
#include "launcher/options.h"

namespace linnet::cli {

int cmd_devices(const Args& args) {
  po::options_description desc("linnet devices");
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet devices")) return 0;
  std::printf("cpu: %d threads, OpenBLAS kernels %s\n", omp_get_max_threads(), blas_coretype().c_str());
  const int n = cuda_device_count();
  if (n == 0) {
    std::printf("cuda: none usable: %s\n", cuda_status().c_str());
    return 1;
  }
  for (int i = 0; i < n; ++i) std::printf("cuda:%d: %s\n", i, cuda_device_description(i).c_str());
  return 0;
}

}  // namespace linnet::cli
