// out[n, o] = x[n, in] · w[o, in]ᵀ with w in bf16 or f16 as the checkpoint stores it (half the
// bytes of f32), x and out in f32, accumulation in f32. Few rows (decode): each weight row is
// widened in registers once for all of them (AVX-512F, else AVX2 + F16C + FMA, else scalar;
// chosen at run time). Many rows (prefill): blocks of weight rows are widened into a buffer
// and multiplied by OpenBLAS's sgemm, the widening spread over as many rows as there are.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace linnet::cpu {

// kernel: one of half_matmul_kernels() for the few-row path (tests run each); null: the best.
void half_matmul(const float* x, int64_t n, int64_t in, const uint16_t* w, DType w_dtype, int64_t o, float* out,
                 const char* kernel = nullptr);

// Which kernel half_matmul's few-row path runs on this CPU: "avx512f", "avx2+f16c" or "scalar".
const char* half_matmul_kernel();
// Every few-row kernel this CPU can run, the best first.
std::vector<const char*> half_matmul_kernels();

}  // namespace linnet::cpu
