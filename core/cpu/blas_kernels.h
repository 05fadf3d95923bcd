// OpenBLAS chooses its kernels from the CPU's model number when it loads. On a CPU it does not
// know — a virtual machine's generic "Intel Xeon Processor", say — it falls back to Prescott's
// SSE3 kernels, 3× slower here than the AVX-512 ones the CPU has. The choice can only be made
// before the library loads (OPENBLAS_CORETYPE), so the launcher asks this first and, when it
// names a kernel set, starts itself again with it.
#pragma once
#include <string>

namespace linnet {

// The OPENBLAS_CORETYPE this CPU supports (SkylakeX with AVX-512, Haswell with AVX2 + FMA)
// when OpenBLAS picked a pre-AVX2 kernel set and OPENBLAS_CORETYPE is unset; else "".
std::string better_blas_coretype();
// The kernel set OpenBLAS is using ("SkylakeX", "Prescott", …).
std::string blas_coretype();

}  // namespace linnet
