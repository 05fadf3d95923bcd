// std.nn.embedding::Embedding<Vocab, H, T>: a row of the table per token (mirrored on every rank).
#pragma once
#include "layers/context.h"

namespace linnet {

struct Embedding {
  Tensor weight;  // [Vocab, H]

  void forward(Context& ctx, const Tensor& ids, Tensor& out) const { ctx.backend.embedding(weight, ids, out); }
};

}  // namespace linnet
