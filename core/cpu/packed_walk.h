// What every packed product shares (core/cpu/packed_matmul.cpp, packed_matmul_8bit.cpp): the
// chains an output element is summed in, the register tiles' heights and the one walk over
// panels and tiles. Internal to core/cpu.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/cpu/packed_matmul.h"

namespace linnet::cpu {

// Each output element is the sum, in this order, of kChains multiply-add chains over fixed
// quarters of k: ((c0 + c1) + c2) + c3. Fixed for every n, so a lone row can run its four
// chains side by side while a tile of 12 rows runs them one after another.
constexpr int kChains = 4;
inline int64_t chain_begin(int64_t k, int q) { return k * q / kChains; }

// One kernel's f32 tiles (a panel of f32 weights [k][32]): tile[rows − 1](x, ldx, k, panel,
// rows, out) for rows 1 … max_rows; `kernel` by packed_matmul_kernels()' names, null the best.
struct F32Tile {
  int max_rows;
  using Fn = void (*)(const float* x, int64_t ldx, int64_t k, const void* panel, int rows, float* tile);
  const Fn* by_rows = nullptr;
};
F32Tile f32_tile(const char* kernel);

constexpr int kRows512 = 12;  // 24 accumulators + 2 weight vectors of the 32 registers
constexpr int kRows2 = 3;     // 12 + 4 of 16

// The one walk over a packed product, whatever the kernel: blocks of rows of x that stay in a
// core's L2 (≈ 1 MiB; row_len: a row's 4-byte words) while every panel passes over them, a
// block a whole number of tiles; panels handed out 4 at a time (threads stream at uneven
// speeds); tiles of even size (16 rows: 8 + 8, not 12 + 4: a small tile runs below the
// multiply-add rate). Blocking over rows and panels only: it never changes an element's chain
// over k. tile(r0, rows, panel, t) fills t[rows × 32]; the wanted columns go to out.
template <class Tile>
void for_each_tile(int64_t n, int64_t row_len, const void* w, size_t panel_bytes, int64_t row0, int64_t o,
                   int64_t tile_rows, float* out, Tile&& tile) {
  const int64_t p_begin = row0 / kPanel, p_end = (row0 + o + kPanel - 1) / kPanel;
  const int64_t block =
      std::max<int64_t>(tile_rows, ((int64_t{1} << 18) / std::max<int64_t>(row_len, 1)) / tile_rows * tile_rows);
  for (int64_t m0 = 0; m0 < n; m0 += block) {
    const int64_t m1 = std::min(n, m0 + block);
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t p = p_begin; p < p_end; ++p) {
      alignas(64) float t[kRows512 * kPanel];
      const void* panel = static_cast<const char*>(w) + static_cast<size_t>(p) * panel_bytes;
      const int64_t c0 = std::max(row0, p * kPanel) - p * kPanel, c1 = std::min(row0 + o, (p + 1) * kPanel) - p * kPanel;
      const int64_t tiles = (m1 - m0 + tile_rows - 1) / tile_rows, even = (m1 - m0 + tiles - 1) / tiles;
      for (int64_t r0 = m0; r0 < m1; r0 += even) {
        const int rows = static_cast<int>(std::min(even, m1 - r0));
        tile(r0, rows, panel, t);
        for (int r = 0; r < rows; ++r)
          std::memcpy(out + (r0 + r) * o + (p * kPanel + c0 - row0), t + r * kPanel + c0,
                      static_cast<size_t>(c1 - c0) * sizeof(float));
      }
    }
  }
}

}  // namespace linnet::cpu
