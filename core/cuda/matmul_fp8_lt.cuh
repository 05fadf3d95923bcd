// FP8 × FP8 products through cuBLASLt on Hopper (sm_90), for the compressed-tensors layers
// whose input is rounded to FP8 (LINNET_CUDA_FP8=cublaslt; docs/quantization.md, "On CUDA"):
// x's codes and scales are made by one kernel (the rounding of round_activations, as codes),
// and cuBLASLt multiplies them with the stored weights on the FP8 tensor cores, the scales
// applied by its own scale modes:
//   - OUTER_VEC_32F × OUTER_VEC_32F: a scale per token × a scale per weight row (FP8 dynamic
//     per token, static per tensor; weights per channel or per tensor);
//   - VEC128_32F × BLK128x128_32F: a scale per token and 128 columns × one per 128×128 block
//     of weights (llm-compressor's FP8_BLOCK scheme, DeepSeek-V3's activations).
// cuBLASLt is opened with dlopen, as the bench's cuBLAS is (cublas_rate.cu): the module links
// neither. Its algorithm is chosen once per weight shape and pinned for every row count, split-K
// off, so that a row's result does not depend on the rows beside it (docs/numerics.md).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "core/cuda/kernels.cuh"
#include "core/weight_layout.h"

namespace linnet::cuda {

// How a product's scales reach cuBLASLt; none: it does not go there.
enum class Fp8LtScales { none, outer, blocks };

// One product: out[n, outs] = x[n, in] rounded to FP8 as `rounding` says · w[row0 : row0 +
// outs]ᵀ (+ bias).
struct Fp8LtProduct {
  const void* x;
  int x_dt;
  const float* row_amax;  // the whole row's amax (a row split across shards); null: its own
  ActivationRounding rounding;
  QuantWeights w;
  int64_t row0;
  const float* block_scales;  // blocks: w's scales in cuBLASLt's BLK128x128 layout, from row0
  const void* bias;           // null: none
  int bias_dt;
  void* out;
  int out_dt;
  int64_t n, in, outs;
};

class Fp8Lt {
 public:
  // Opens libcublasLt and a handle on `device` (current); throws linnet::Error naming what
  // is missing: the library, or a device other than sm_90.
  explicit Fp8Lt(int device);
  ~Fp8Lt();
  Fp8Lt(const Fp8Lt&) = delete;
  Fp8Lt& operator=(const Fp8Lt&) = delete;

  // Which scale modes take this product (none: the caller rounds x and takes its own). A
  // shape cuBLASLt has no pinned algorithm for is none for every row count.
  Fp8LtScales plan(const Fp8LtProduct& p);
  // Device bytes run() needs beside its arguments (x's codes and scales, the f32 product, cuBLASLt's workspace).
  static size_t workspace_bytes(const Fp8LtProduct& p, Fp8LtScales mode);
  void run(const Fp8LtProduct& p, Fp8LtScales mode, void* workspace, cudaStream_t s);

  int64_t products = 0, shapes_refused = 0;  // counters()

  struct Api;  // cuBLASLt's functions, as dlopen found them (matmul_fp8_lt.cu)

 private:
  struct Pinned;
  const Pinned* pinned(int64_t outs, int64_t in, Fp8LtScales mode);
  std::unique_ptr<Api> api_;
  void* handle_ = nullptr;
  std::map<std::tuple<int64_t, int64_t, int>, std::unique_ptr<Pinned>> pinned_;  // null: refused
  std::set<std::tuple<int64_t, int64_t, int, int64_t>> checked_;                 // (…, padded rows) taken
};

// Rows a product is padded to for cuBLASLt (its FP8 layouts want multiples of 16).
inline int64_t fp8_lt_rows(int64_t n) { return (n + 15) / 16 * 16; }

// The BLK128x128 layout of an FP8 matrix's block scales: [⌈rows/128⌉][⌈cols/128⌉ rounded up
// to 4] f32, from row-major per-row scales [rows][groups] that repeat over each 128 rows (the
// CUDA matrix keeps a block's scale on each of its rows). Empty where they do not repeat so
// (parts stacked off the 128-row grid) or the groups are not 128 columns.
std::vector<float> fp8_block128_scales(const float* row_scales, int64_t rows, int64_t cols, int64_t group);

}  // namespace linnet::cuda
