// Where a Model's weights come from: a checkpoint (checkpoint/), random values, or a test's
// tensors. The model asks for each parameter's slice on its shard; it never sees files.
#pragma once
#include "core/tensor.h"
#include "layers/parameters.h"

namespace linnet {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Shard `shard` of p: a host tensor of p.shard_shape() in any float dtype, rows past the
  // stored extent (lm_head's padding) zero.
  virtual Tensor read(const ParamSpec& p, int64_t shard) = 0;
  // The model's matrix `name` ("layers[0].attention.qkv_proj.weight", …) already laid out in
  // a backend's `format` (Backend::packed_format), rows × cols as `shape`, in `dtype` — or an
  // undefined tensor, and the model reads and lays out its parts itself.
  virtual Tensor packed(const std::string& name, const std::string& format, DType dtype, const Shape& shape) {
    (void)name, (void)format, (void)dtype, (void)shape;
    return {};
  }
};

}  // namespace linnet
