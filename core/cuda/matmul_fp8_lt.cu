// FP8 × FP8 products through cuBLASLt (core/cuda/matmul_fp8_lt.cuh).
//
// Row-major out[n, outs] = x[n, in] · w[outs, in]ᵀ is, column-major, D[outs, n] = op(A)·B with
// A = w as [in, outs] (ld in, transposed: cuBLASLt's FP8 "TN" form) and B = x's codes as
// [in, n] (ld in). So cuBLASLt's M is the weight rows and its N the tokens: A's scales are the
// weights', B's the tokens'. D is f32; one more kernel adds the bias and rounds to out's dtype,
// as the SIMT product does, so the only difference is the order of the f32 sums.
#include <cublasLt.h>
#include <dlfcn.h>

#include <algorithm>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/matmul_fp8_lt.cuh"

namespace linnet::cuda {

struct Fp8Lt::Api {
  void* lib = nullptr;
#define LINNET_LT_FN(name) decltype(&::name) name = nullptr;
  LINNET_LT_FN(cublasLtCreate)
  LINNET_LT_FN(cublasLtDestroy)
  LINNET_LT_FN(cublasLtMatmulDescCreate)
  LINNET_LT_FN(cublasLtMatmulDescDestroy)
  LINNET_LT_FN(cublasLtMatmulDescSetAttribute)
  LINNET_LT_FN(cublasLtMatrixLayoutCreate)
  LINNET_LT_FN(cublasLtMatrixLayoutDestroy)
  LINNET_LT_FN(cublasLtMatmulPreferenceCreate)
  LINNET_LT_FN(cublasLtMatmulPreferenceDestroy)
  LINNET_LT_FN(cublasLtMatmulPreferenceSetAttribute)
  LINNET_LT_FN(cublasLtMatmulAlgoGetHeuristic)
  LINNET_LT_FN(cublasLtMatmulAlgoConfigSetAttribute)
  LINNET_LT_FN(cublasLtMatmulAlgoCheck)
  LINNET_LT_FN(cublasLtMatmul)
#undef LINNET_LT_FN
};

// One shape's algorithm, chosen at kPinRows rows and taken at every row count.
struct Fp8Lt::Pinned {
  cublasLtMatmulAlgo_t algo;
};

namespace {

constexpr size_t kLtWorkspace = size_t{4} << 20;  // cuBLASLt's own scratch, at most
constexpr int64_t kPinRows = 128;                 // the row count the algorithm is chosen at
constexpr size_t kAlign = 256;

size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

void lt_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw Error(str("cuda matmul_rounded: cuBLASLt's ", what, " failed (status ", int(st), ")"));
}

// The scale columns of x a product takes: 1 a row (outer) or one a 128 columns (blocks).
int64_t x_scale_groups(const Fp8LtProduct& p, Fp8LtScales mode) {
  return mode == Fp8LtScales::blocks ? (p.in + 127) / 128 : 1;
}

// Descriptors of one call: matmul (scale modes and pointers), A, B and D layouts; destroyed with it.
struct LtCall {
  const Fp8Lt::Api* api = nullptr;  // (set by make_call)
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  ~LtCall() {
    if (!api) return;
    if (d) api->cublasLtMatrixLayoutDestroy(d);
    if (b) api->cublasLtMatrixLayoutDestroy(b);
    if (a) api->cublasLtMatrixLayoutDestroy(a);
    if (desc) api->cublasLtMatmulDescDestroy(desc);
  }
};

void make_call(const Fp8Lt::Api& api, LtCall& c, int64_t outs, int64_t in, int64_t rows, Fp8LtScales mode,
               const float* a_scales, const float* b_scales) {
  c.api = &api;
  lt_check(api.cublasLtMatmulDescCreate(&c.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
  const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
  const int8_t fast_accum = 0;  // partial sums promoted to f32 as they go (DeepSeek-V3's caution)
  const int32_t a_mode = mode == Fp8LtScales::blocks ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                                     : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  const int32_t b_mode = mode == Fp8LtScales::blocks ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                     : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t bytes) {
    lt_check(api.cublasLtMatmulDescSetAttribute(c.desc, attr, v, bytes), "matmul attribute");
  };
  set(CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  set(CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt);
  set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof fast_accum);
  set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof a_mode);
  set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof b_mode);
  set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scales, sizeof a_scales);
  set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scales, sizeof b_scales);
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  lt_check(api.cublasLtMatrixLayoutCreate(&c.a, CUDA_R_8F_E4M3, u(in), u(outs), in), "layout of A");
  lt_check(api.cublasLtMatrixLayoutCreate(&c.b, CUDA_R_8F_E4M3, u(in), u(rows), in), "layout of B");
  lt_check(api.cublasLtMatrixLayoutCreate(&c.d, CUDA_R_32F, u(outs), u(rows), outs), "layout of D");
}

// One block per (row, group of columns) of the padded rows: x's FP8 codes [rows, W] and scales,
// the rounding of round_activations_kernel (elementwise.cu) kept as codes and scales instead of
// their product. scales[g · rows + r] (cuBLASLt's VEC128 layout for B; one group: a scale a row).
// Padding rows (r ≥ n) get zero codes and scale.
__global__ void fp8_codes_kernel(const void* x, int xdt, int64_t n, int64_t W, int64_t group, int64_t groups,
                                 const float* row_amax, float static_scale, uint8_t* codes, float* scales,
                                 int64_t rows) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x / groups, g = blockIdx.x % groups, c0 = g * group, c1 = min(W, c0 + group);
  uint8_t* q = codes + r * W;
  if (r >= n) {
    for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) q[c] = 0;
    if (threadIdx.x == 0) scales[g * rows + r] = 0.f;
    return;
  }
  float s = static_scale;
  if (static_scale <= 0.f) {  // (one branch for the whole launch: block_max's barriers)
    float amax;
    if (row_amax) {
      amax = row_amax[r];
    } else {
      float m = 0.f;
      for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) m = fmaxf(m, fabsf(load_any(x, xdt, r * W + c)));
      amax = block_max(m, scratch);
    }
    s = dynamic_activation_scale(amax, true);
  }
  // (satfinite: beyond ±448 saturates as the reference's clamp does; NaN stays NaN.)
  for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) q[c] = f32_to_e4m3(__fdiv_rn(load_any(x, xdt, r * W + c), s));
  if (threadIdx.x == 0) scales[g * rows + r] = s;
}

// out[r, o] = D[r, o] (+ bias[o]) in out's dtype, rows r < n.
__global__ void fp8_lt_epilogue_kernel(const float* d, int64_t n, int64_t outs, const void* bias, int bdt, void* out,
                                       int odt) {
  const int64_t total = n * outs;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = d[i];
    if (bias) v += load_any(bias, bdt, i % outs);
    store_any(out, odt, i, v);
  }
}

}  // namespace

Fp8Lt::Fp8Lt(int device) : api_(std::make_unique<Api>()) {
  int major = 0, minor = 0;
  LINNET_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  LINNET_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0)
    throw Error(str("LINNET_CUDA_FP8=cublaslt: cuBLASLt's scaled FP8 products (per-row and 128×128 block scales) are "
                    "Hopper's (sm_90); this GPU is sm_", major, minor, " (unset LINNET_CUDA_FP8, or exact)"));
  for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"})
    if ((api_->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
  if (!api_->lib) throw Error(str("LINNET_CUDA_FP8=cublaslt: no cuBLASLt library (", dlerror(), ")"));
  bool all = true;
#define LINNET_LT_LOAD(name) \
  all = all && (api_->name = reinterpret_cast<decltype(api_->name)>(dlsym(api_->lib, #name))) != nullptr;
  LINNET_LT_LOAD(cublasLtCreate)
  LINNET_LT_LOAD(cublasLtDestroy)
  LINNET_LT_LOAD(cublasLtMatmulDescCreate)
  LINNET_LT_LOAD(cublasLtMatmulDescDestroy)
  LINNET_LT_LOAD(cublasLtMatmulDescSetAttribute)
  LINNET_LT_LOAD(cublasLtMatrixLayoutCreate)
  LINNET_LT_LOAD(cublasLtMatrixLayoutDestroy)
  LINNET_LT_LOAD(cublasLtMatmulPreferenceCreate)
  LINNET_LT_LOAD(cublasLtMatmulPreferenceDestroy)
  LINNET_LT_LOAD(cublasLtMatmulPreferenceSetAttribute)
  LINNET_LT_LOAD(cublasLtMatmulAlgoGetHeuristic)
  LINNET_LT_LOAD(cublasLtMatmulAlgoConfigSetAttribute)
  LINNET_LT_LOAD(cublasLtMatmulAlgoCheck)
  LINNET_LT_LOAD(cublasLtMatmul)
#undef LINNET_LT_LOAD
  cublasLtHandle_t h = nullptr;
  if (!all || api_->cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    dlclose(api_->lib);
    throw Error("LINNET_CUDA_FP8=cublaslt: cuBLASLt was found but lacks the scaled FP8 product's functions, or "
                "could not start (CUDA 12.9 or later is needed)");
  }
  handle_ = h;
}

Fp8Lt::~Fp8Lt() {
  if (handle_) api_->cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
  // (the library stays loaded: cuBLASLt's own teardown may run at exit)
}

const Fp8Lt::Pinned* Fp8Lt::pinned(int64_t outs, int64_t in, Fp8LtScales mode) {
  const auto key = std::make_tuple(outs, in, static_cast<int>(mode));
  if (auto it = pinned_.find(key); it != pinned_.end()) return it->second.get();
  const auto h = static_cast<cublasLtHandle_t>(handle_);
  LtCall call;
  make_call(*api_, call, outs, in, kPinRows, mode, nullptr, nullptr);
  cublasLtMatmulPreference_t pref = nullptr;
  lt_check(api_->cublasLtMatmulPreferenceCreate(&pref), "preference");
  const uint64_t ws = kLtWorkspace;
  const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  api_->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  api_->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_reduction,
                                             sizeof no_reduction);
  cublasLtMatmulHeuristicResult_t found[8] = {};
  int count = 0;
  const cublasStatus_t st =
      api_->cublasLtMatmulAlgoGetHeuristic(h, call.desc, call.a, call.b, call.d, call.d, pref, 8, found, &count);
  api_->cublasLtMatmulPreferenceDestroy(pref);
  std::unique_ptr<Pinned> p;
  for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < count && !p; ++i) {
    // One k range a thread block, summed in its own order: split-K off, whatever was proposed.
    cublasLtMatmulAlgo_t algo = found[i].algo;
    const int32_t one = 1;
    const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasLtMatmulHeuristicResult_t check = {};
    if (api_->cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one, sizeof one) ==
            CUBLAS_STATUS_SUCCESS &&
        api_->cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none, sizeof none) ==
            CUBLAS_STATUS_SUCCESS &&
        api_->cublasLtMatmulAlgoCheck(h, call.desc, call.a, call.b, call.d, call.d, &algo, &check) ==
            CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= kLtWorkspace)
      p = std::make_unique<Pinned>(Pinned{algo});
  }
  if (!p) ++shapes_refused;
  return (pinned_[key] = std::move(p)).get();
}

Fp8LtScales Fp8Lt::plan(const Fp8LtProduct& p) {
  const QuantWeights& w = p.w;
  const ActivationRounding& r = p.rounding;
  if (w.format != static_cast<int32_t>(WeightFormat::fp8) || w.group_index || r.format != ActivationFormat::fp8)
    return Fp8LtScales::none;
  // cuBLASLt's FP8 operands: 16-byte aligned columns of A and B, D's rows whole 16-byte lines.
  if (p.in % 16 != 0 || p.outs % 16 != 0) return Fp8LtScales::none;
  Fp8LtScales mode = Fp8LtScales::none;
  if ((r.group < 0 || r.stored) && w.groups == 1)
    mode = Fp8LtScales::outer;
  else if (r.group == 128 && !r.stored && w.group == 128 && p.block_scales && p.row0 % 128 == 0 && p.in % 128 == 0)
    mode = Fp8LtScales::blocks;
  if (mode == Fp8LtScales::none || !pinned(p.outs, p.in, mode)) return Fp8LtScales::none;
  return mode;
}

size_t Fp8Lt::workspace_bytes(const Fp8LtProduct& p, Fp8LtScales mode) {
  const auto rows = static_cast<size_t>(fp8_lt_rows(p.n));
  return aligned(rows * static_cast<size_t>(p.in)) + aligned(rows * static_cast<size_t>(x_scale_groups(p, mode)) * 4) +
         aligned(rows * static_cast<size_t>(p.outs) * 4) + kLtWorkspace;
}

void Fp8Lt::run(const Fp8LtProduct& p, Fp8LtScales mode, void* workspace, cudaStream_t s) {
  const Pinned* pin = pinned(p.outs, p.in, mode);
  if (!pin) throw Error("cuda matmul_rounded: no pinned cuBLASLt algorithm for this product (plan() said none)");
  const int64_t rows = fp8_lt_rows(p.n), groups = x_scale_groups(p, mode);
  auto* base = static_cast<uint8_t*>(workspace);
  auto* codes = base;
  auto* x_scales = reinterpret_cast<float*>(base + aligned(static_cast<size_t>(rows * p.in)));
  auto* d = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(x_scales) + aligned(static_cast<size_t>(rows * groups) * 4));
  void* lt_ws = reinterpret_cast<uint8_t*>(d) + aligned(static_cast<size_t>(rows * p.outs) * 4);

  const int64_t group = mode == Fp8LtScales::blocks ? 128 : p.in;
  fp8_codes_kernel<<<static_cast<unsigned>(rows * groups), 128, 0, s>>>(
      p.x, p.x_dt, p.n, p.in, group, groups, p.row_amax, p.rounding.stored ? p.rounding.scale : 0.f, codes, x_scales,
      rows);
  LINNET_CUDA_LAUNCH_CHECK();

  const float* a_scales = mode == Fp8LtScales::blocks ? p.block_scales : p.w.scales + p.row0;
  LtCall call;
  make_call(*api_, call, p.outs, p.in, rows, mode, a_scales, x_scales);
  const auto h = static_cast<cublasLtHandle_t>(handle_);
  const auto key = std::make_tuple(p.outs, p.in, static_cast<int>(mode), rows);
  if (!checked_.count(key)) {  // the pinned algorithm at this row count, or a loud stop (never another algorithm)
    cublasLtMatmulHeuristicResult_t check = {};
    if (api_->cublasLtMatmulAlgoCheck(h, call.desc, call.a, call.b, call.d, call.d, &pin->algo, &check) !=
            CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > kLtWorkspace)
      throw Error(str("cuda matmul_rounded: cuBLASLt's FP8 algorithm pinned for [", p.outs, ", ", p.in,
                      "] does not take ", rows, " rows; unset LINNET_CUDA_FP8 to keep the exact product"));
    checked_.insert(key);
  }
  const float one = 1.f, zero = 0.f;
  const uint8_t* a = p.w.values + p.row0 * p.in;
  lt_check(api_->cublasLtMatmul(h, call.desc, &one, a, call.a, codes, call.b, &zero, d, call.d, d, call.d, &pin->algo,
                                lt_ws, kLtWorkspace, s),
           "matmul");
  fp8_lt_epilogue_kernel<<<blocks_for(p.n * p.outs, 256), 256, 0, s>>>(d, p.n, p.outs, p.bias, p.bias_dt, p.out,
                                                                       p.out_dt);
  LINNET_CUDA_LAUNCH_CHECK();
  ++products;
}

std::vector<float> fp8_block128_scales(const float* row_scales, int64_t rows, int64_t cols, int64_t group) {
  if (group != 128) return {};
  const int64_t groups = (cols + 127) / 128, padded = (groups + 3) / 4 * 4, blocks = (rows + 127) / 128;
  std::vector<float> out(static_cast<size_t>(blocks * padded), 0.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const float v = row_scales[r * groups + g];
      float& o = out[static_cast<size_t>((r / 128) * padded + g)];
      if (r % 128 == 0)
        o = v;
      else if (v != o)
        return {};  // not one scale a 128×128 block
    }
  return out;
}

}  // namespace linnet::cuda
