// The quantized product on tensor cores: x bf16 or f16 (T), a quantized matrix whose weights,
// as its format dequantizes them, are values of T — compressed-tensors' on a 16-bit model (each
// weight rounded to the scales' dtype, the model's), GPTQ's and AWQ's in f16 (rounded to f16),
// MXFP4's in bf16 (e2m1 · 2^e, exact). The current family's kernels (matmul_tc.cuh) with each
// weight dequantized as it is loaded into the shared-memory tile (QuantizedAt): the same mma
// steps on the same values in the same order as the dense tensor-core product on the
// dequantized matrix, so its bits, and the same bits for any N (batch invariance). Others (f32
// activations, weights kept at their f32 dequantization) stay on the SIMT tile (matmul.cu).
#include "core/cuda/matmul_tc.cuh"
#include "core/cuda/quantized_weights.cuh"

namespace linnet::cuda {
namespace {

// A weight as a T: exact where matmul_tc_quantized_applies.
template <class T, int F>
struct TcDequantized {
  QuantizedAt<F> at;
  int64_t row0;  // the matrix view's first row
  static constexpr bool kStored = false;
  __device__ __forceinline__ T operator()(int64_t r, int64_t k) const { return from_f<T>(at(row0 + r, k)); }
};

}  // namespace

bool matmul_tc_quantized_applies(int xdt, const QuantWeights& w) {
  if (xdt != kBF16 && xdt != kF16) return false;
  if (w.dequant == xdt) return true;
  return w.format == kMxfp4 && w.dequant == kF32 && xdt == kBF16;
}

void launch_matmul_quantized_tc(const void* x, int xdt, const QuantWeights& w, int64_t row0, const void* bias, int bdt,
                                void* out, int odt, int64_t N, int64_t K, int64_t O, bool panel, float* workspace,
                                cudaStream_t s) {
  if (N == 0 || O == 0) return;
  if (!matmul_tc_quantized_applies(xdt, w))
    throw Error(str("cuda matmul: weights of format ", weight_format_name(static_cast<WeightFormat>(w.format)),
                    " dequantized to ", dtype_name(static_cast<DType>(w.dequant)), " are not values of ",
                    dtype_name(static_cast<DType>(xdt)), " activations: no tensor-core product"));
  const bool vec = K % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  auto typed = [&]<class T>() {
    by_format(w, "matmul", [&]<int F>() {
      // (Split-K blocks of 16 rows only: a third of the kernels to build, the same bits.)
      tc::launch_tc8<T, TcDequantized<T, F>, false>(vec, static_cast<const T*>(x),
                                                    TcDequantized<T, F>{QuantizedAt<F>{w}, row0}, bias, bdt, out, odt,
                                                    N, K, O, panel, workspace, s);
    });
  };
  if (xdt == kBF16)
    typed.template operator()<__nv_bfloat16>();
  else
    typed.template operator()<__half>();
}

}  // namespace linnet::cuda
