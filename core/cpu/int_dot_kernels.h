// What the integer dot products' kernels share across the files that build them for each
// instruction set (core/cpu/packed_matmul_int_dot.cpp: AVX2 and the scalar kernel;
// packed_matmul_int_dot_vnni.cpp: VNNI): x as quantized, and each set's kernel table. Internal
// to those files.
#pragma once
#include <cstdint>
#include <vector>

#include "core/cpu/packed_matmul.h"
#include "core/cpu/packed_quantized.h"

namespace linnet::cpu::intdot {

constexpr int64_t kBlock = 32;  // x's quantization block (columns), and the integer sums'
// Rows of x a tile: prefill 512 of the Llama-3.2-1B shape's W4A16 at 78 tok/s with 3 (before
// the weights were unpacked once a tile), 84 with 3, 88 with 4, 89 with 6, 87 with 8.
constexpr int kRowsDot = 4;

// x quantized, and each block's group of the weights' scales (a table: no division a block).
struct DotInput {
  Q8Rows x;
  std::vector<int32_t> group;  // [k / 32]
};

// A kernel: rows [r0, r0 + rows) of x against a panel's 32 rows, into tile [rows][32].
template <class Panel>
using Kernel = void (*)(const DotInput& in, int64_t r0, int rows, const Panel& p, float* tile);
// One instruction set's kernels, by format and rows of x (1 … kRowsDot).
struct Kernels {
  Kernel<quantized::Int4Panel> int4[kRowsDot];
  Kernel<quantized::Mxfp4Panel> mxfp4[kRowsDot];
  Kernel<quantized::BytePanel> int8[kRowsDot];
};

namespace avx2 {
Kernels kernels();
}
namespace avx512vnni {  // AVX512_VNNI with AVX512VL: vpdpbusd on 256-bit vectors
Kernels kernels();
}
namespace avxvnni {  // AVX-VNNI (VEX): the same instruction
Kernels kernels();
}

}  // namespace linnet::cpu::intdot
