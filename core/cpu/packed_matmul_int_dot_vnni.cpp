// The integer dot products' SIMD kernels (int_dot_simd.inc) with VNNI's vpdpbusd: each 32-bit
// lane adds its 4 u8 × s8 products at once, where AVX2 needs vpmaddubsw and vpmaddwd and an i16
// sum between them. The sums are the same exact integers, so the kernels give the AVX2 ones' bits
// (IntDot.EveryKernelAndRowCountGiveTheSameBits runs every kernel this CPU has). Built twice:
// for AVX512_VNNI (with AVX512VL, on 256-bit vectors: AMD Zen 4, Intel since Ice Lake) and for
// AVX-VNNI (the VEX encoding: Intel since Alder Lake, AMD Zen 5); chosen at run time
// (int_dot_kernels, packed_matmul_int_dot.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "core/cpu/int_dot_kernels.h"

namespace linnet::cpu::intdot {

#define LINNET_DOT_NS avx512vnni
#define LINNET_DOT_TARGET "avx2,fma,avx512vnni,avx512vl"
#define LINNET_DOT_VNNI 1
#define LINNET_DPBUSD _mm256_dpbusd_epi32
#include "core/cpu/int_dot_simd.inc"
#undef LINNET_DOT_NS
#undef LINNET_DOT_TARGET
#undef LINNET_DPBUSD

#define LINNET_DOT_NS avxvnni
#define LINNET_DOT_TARGET "avx2,fma,avxvnni"
#define LINNET_DPBUSD _mm256_dpbusd_avx_epi32
#include "core/cpu/int_dot_simd.inc"
#undef LINNET_DOT_NS
#undef LINNET_DOT_TARGET
#undef LINNET_DPBUSD
#undef LINNET_DOT_VNNI

}  // namespace linnet::cpu::intdot

#pragma GCC diagnostic pop
