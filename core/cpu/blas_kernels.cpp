#include "core/cpu/blas_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace linnet {

std::string blas_coretype() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

std::string better_blas_coretype() {
  if (std::getenv("OPENBLAS_CORETYPE")) return "";
  std::string core = blas_coretype();
  std::transform(core.begin(), core.end(), core.begin(), [](unsigned char c) { return std::tolower(c); });
  static const char* generic[] = {"prescott", "katmai",    "coppermine", "northwood", "banias", "atom",
                                  "core2",    "penryn",    "dunnington", "nehalem",   "unknown"};
  if (std::find(std::begin(generic), std::end(generic), core) == std::end(generic)) return "";
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

}  // namespace linnet
