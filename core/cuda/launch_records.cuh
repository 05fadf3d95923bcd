// What the CUDA backend records of each launch (CudaBackend::submit): one struct per kind of
// work, its fields named, run() launching it (core/cuda/cuda_backend.cu). A step's records are
// the key of the graph that replays them (GraphCache), compared and hashed byte by byte: each
// struct has no padding (every byte a field's; checked below), so equal fields mean equal bytes.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <variant>

#include "core/cuda/kernels.cuh"

namespace linnet::cuda::launch {

// dst ← src, bytes of device memory.
struct Memcpy {
  void* dst;
  const void* src;
  int64_t bytes;
  void run(cudaStream_t s) const;
};
// dst ← 0.
struct Memset {
  void* dst;
  int64_t bytes;
  void run(cudaStream_t s) const;
};
// dst[n] ← src[n] converted (n elements).
struct Convert {
  const void* src;
  void* dst;
  int64_t n;
  int32_t src_dt, dst_dt;
  void run(cudaStream_t s) const;
};
// out[rows, width] ← weight[vocab, width] at ids.
struct Embedding {
  const void* weight;
  const int32_t* ids;
  void* out;
  int64_t vocab, rows, width;
  int32_t weight_dt, out_dt;
  void run(cudaStream_t s) const;
};
// out[n, outs] ← x[n, in] · w[outs, in]ᵀ (+ bias), on tensor cores (matmul_tc.cu).
struct MatmulTc {
  const void* x;
  const void* w;
  const void* bias;  // null: none
  void* out;
  float* workspace;  // null: none (the split-K chains)
  int64_t n, in, outs;
  int32_t x_dt, w_dt, bias_dt, out_dt;
  int32_t tc4, panel;  // TcChoice
  void run(cudaStream_t s) const;
};
// The same product on CUDA cores (matmul.cu).
struct MatmulSimt {
  const void* x;
  const void* w;
  const void* bias;
  void* out;
  int64_t n, in, outs;
  int32_t x_dt, w_dt, bias_dt, out_dt;
  void run(cudaStream_t s) const;
};
// The same product on a quantized matrix, dequantized as its tiles load: the SIMT tile (matmul.cu), or
// tensor cores where the weights are values of x's dtype (matmul_tc_quantized.cu).
struct MatmulQuantized {
  const void* x;
  const void* bias;
  void* out;
  float* workspace;  // tc: the split-K chains (null: none)
  int64_t n, in, outs, row0;  // row0: the matrix view's first row
  QuantWeights w;
  int32_t x_dt, bias_dt, out_dt;
  int32_t tc;  // 0: the SIMT tile (matmul.cu); 1: tensor cores, panel first; 2: columns first (matmul_tc_quantized.cu)
  void run(cudaStream_t s) const;
};
// (x += delta, when delta is given;) out ← rms_norm(x) · w.
struct RmsNorm {
  void* x;
  const void* delta;  // null: rms_norm alone
  const void* w;
  void* out;
  int64_t rows, width;
  int32_t act_dt, w_dt;
  float eps;
  int32_t unused;
  void run(cudaStream_t s) const;
};
// x += y (n elements).
struct Add {
  void* x;
  const void* y;
  int64_t n;
  int32_t dt, unused;
  void run(cudaStream_t s) const;
};
// Backend::rope_heads.
struct Rope {
  void* x;
  const int32_t* positions;
  const void* inv_freq;
  int64_t rows, width, head_begin, heads, head_dim, half;
  int32_t dt, inv_freq_dt, per_token;
  float scale;
  void run(cudaStream_t s) const;
};
// out[rows, inner] ← silu(gate) · up.
struct Swiglu {
  const void* gate_up;
  void* out;
  int64_t rows, inner;
  int32_t dt, unused;
  void run(cudaStream_t s) const;
};
// Backend::kv_write.
struct KvWrite {
  const void* qkv;
  const int32_t* slots;
  void* cache_k;
  void* cache_v;
  int64_t rows;
  AttnGeom geom;
  int32_t dt, unused;
  void run(cudaStream_t s) const;
};
// Backend::attention_packed.
struct AttentionPacked {
  const void* qkv;
  const int32_t* run_start;
  void* out;
  int64_t rows;
  AttnGeom geom;
  int32_t dt, unused;
  void run(cudaStream_t s) const;
};
// Backend::attention_cache over one chunk of tokens.
struct AttentionCache {
  const void* qkv;
  const int32_t* rows;
  const int32_t* positions;
  const int32_t* table;
  const void* cache_k;
  const void* cache_v;
  void* out;
  float* workspace;
  int64_t n, table_rows, table_pages;
  AttnGeom geom;
  int32_t dt, splits, prefetch, split_base;
  void run(cudaStream_t s) const;
};
// out[m] ← src[index[m]] (row_bytes each), or zeros where index[m] < 0.
struct GatherRows {
  const void* src;
  const int32_t* index;
  void* out;
  int64_t src_rows, out_rows, row_bytes;
  void run(cudaStream_t s) const;
};
// rows of width bytes, between pitches (copy_columns of one dtype).
struct Copy2D {
  void* dst;
  const void* src;
  int64_t dst_pitch, src_pitch, width, rows;
  void run(cudaStream_t s) const;
};
// Backend::copy_columns between dtypes.
struct CopyColumns {
  const void* src;
  void* dst;
  int64_t src_w, dst_w, rows, col_begin, cols;
  int32_t src_dt, dst_dt;
  void run(cudaStream_t s) const;
};
// Backend::copy_heads.
struct CopyHeads {
  const void* src;
  void* dst;
  int64_t src_w, dst_w, tokens, elem_bytes, src_begin, src_stride, step, dst_begin, dst_stride, heads, width;
  int32_t src_blocks, dst_blocks;
  void run(cudaStream_t s) const;
};
// Backend::logit_stats.
struct LogitStats {
  const void* logits;
  const int32_t* targets;
  float* max;
  float* sumexp;
  float* target_logit;
  float* workspace;  // split rows (null: a block per row)
  int64_t rows, width, valid, vocab_offset;
  int32_t dt, split_rows;
  void run(cudaStream_t s) const;
};
// Backend::argmax and gumbel_max.
struct Argmax {
  const void* logits;
  float* value;
  int32_t* index;
  float* workspace;  // split rows (null: a block per row)
  int64_t rows, width, valid, vocab_offset;
  uint64_t key0, key1;
  int32_t dt, gumbel, step;
  float temperature;
  int32_t split_rows, unused;
  void run(cudaStream_t s) const;
};

// Each record's size is the sum of its fields' (no padding): pointers and 64-bit fields, then
// 32-bit ones (an even count), then an AttnGeom where there is one.
static_assert(sizeof(Memcpy) == 3 * 8);
static_assert(sizeof(Memset) == 2 * 8);
static_assert(sizeof(Convert) == 3 * 8 + 2 * 4);
static_assert(sizeof(Embedding) == 6 * 8 + 2 * 4);
static_assert(sizeof(MatmulTc) == 8 * 8 + 6 * 4);
static_assert(sizeof(MatmulSimt) == 7 * 8 + 4 * 4);
static_assert(sizeof(MatmulQuantized) == 8 * 8 + sizeof(QuantWeights) + 4 * 4);
static_assert(sizeof(RmsNorm) == 6 * 8 + 4 * 4);
static_assert(sizeof(Add) == 3 * 8 + 2 * 4);
static_assert(sizeof(Rope) == 9 * 8 + 4 * 4);
static_assert(sizeof(Swiglu) == 4 * 8 + 2 * 4);
static_assert(sizeof(KvWrite) == 5 * 8 + sizeof(AttnGeom) + 2 * 4);
static_assert(sizeof(AttentionPacked) == 4 * 8 + sizeof(AttnGeom) + 2 * 4);
static_assert(sizeof(AttentionCache) == 11 * 8 + sizeof(AttnGeom) + 4 * 4);
static_assert(sizeof(GatherRows) == 6 * 8);
static_assert(sizeof(Copy2D) == 6 * 8);
static_assert(sizeof(CopyColumns) == 7 * 8 + 2 * 4);
static_assert(sizeof(CopyHeads) == 13 * 8 + 2 * 4);
static_assert(sizeof(LogitStats) == 10 * 8 + 2 * 4);
static_assert(sizeof(Argmax) == 10 * 8 + 6 * 4);

}  // namespace linnet::cuda::launch

namespace linnet::cuda {

// One piece of work for the stream, by value.
using Launch = std::variant<launch::Memcpy, launch::Memset, launch::Convert, launch::Embedding, launch::MatmulTc,
                            launch::MatmulSimt, launch::MatmulQuantized, launch::RmsNorm, launch::Add, launch::Rope, launch::Swiglu,
                            launch::KvWrite, launch::AttentionPacked, launch::AttentionCache, launch::GatherRows,
                            launch::Copy2D, launch::CopyColumns, launch::CopyHeads, launch::LogitStats, launch::Argmax>;

inline void run_launch(const Launch& l, cudaStream_t s) {
  std::visit([s](const auto& r) { r.run(s); }, l);
}

// The same kind with the same bytes: the same work (pointers, shapes, dtypes, scalars).
inline bool same_launch(const Launch& a, const Launch& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&b](const auto& r) {
        using R = std::decay_t<decltype(r)>;
        return std::memcmp(&r, &std::get<R>(b), sizeof(R)) == 0;
      },
      a);
}

// h folded with a record's kind and bytes.
inline uint64_t hash_launch(uint64_t h, const Launch& l) {
  auto mix = [&h](uint64_t w) {
    h ^= w;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  };
  mix(l.index());
  std::visit(
      [&mix](const auto& r) {
        static_assert(sizeof r % 8 == 0);
        uint64_t w[sizeof r / 8];
        std::memcpy(w, &r, sizeof r);
        for (uint64_t x : w) mix(x);
      },
      l);
  return h;
}

}  // namespace linnet::cuda
