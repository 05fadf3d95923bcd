// What a block is told about its family: the options each block takes, so that a block header
// never sees the whole ModelConfig (the architecture, architectures/*.cpp, decides them; the
// network in layers/model.cpp hands each block its own). New families add a field here, not a
// ModelConfig dependency in the block: gpt-oss's attention sinks belong in AttentionOptions,
// its clamped SwiGLU in MlpOptions, DeepSeek's shared expert and grouped router beside the
// Router of layers/sparse_moe.h.
#pragma once
#include <cstdint>
#include <optional>

namespace linnet {

// q/k norms: per head (Qwen 3, Gemma 3, OLMo 3's none) or over the whole projection (OLMo 2/3).
enum class QkNorm { none, per_head, whole };

// The gate's activation in gate·up: SwiGLU's silu, or GeGLU's tanh GELU (Gemma).
enum class MlpActivation { silu, gelu_tanh };

struct AttentionOptions {
  QkNorm qk_norm = QkNorm::none;
  std::optional<int64_t> window;  // sliding window (positions seen, this one included); none: full
  float scale = 0;                // q·k · scale (0: 1/√D)
  float softcap = 0;              // cap · tanh(s / cap) on the scaled scores (0: none)
  bool sinks = false;             // a learned logit per head in each softmax's denominator (gpt-oss)
};

// gpt-oss's experts' activation over interleaved gate/up columns (Backend::swiglu_clamped).
struct ClampedSwiglu {
  float alpha = 1.702f;  // swiglu_alpha
  float limit = 7.0f;    // swiglu_limit
  bool operator==(const ClampedSwiglu&) const = default;
};

struct MlpOptions {
  MlpActivation activation = MlpActivation::silu;
};

}  // namespace linnet
