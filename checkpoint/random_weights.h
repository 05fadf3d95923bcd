// Deterministic random weights: every element is a function of (seed, tensor name, element
// index), so any shard's slice equals the same rows of the whole tensor, and a checkpoint can
// be written tensor by tensor without holding it in memory.
#pragma once
#include <cstdint>
#include <string>

#include "layers/weight_source.h"

namespace linnet {

class Backend;

// Fills out[0..count) with the values of `name`'s elements [first, first + count).
void random_values(uint64_t seed, const std::string& name, const Shape& full, int64_t first, int64_t count, float* out);

class RandomWeights final : public WeightSource {
 public:
  // device: a backend that can make the matrices where they live (Backend::random_normal:
  // the CUDA backend, straight into `dtype`, in milliseconds); read() then returns them as
  // device tensors, which the model takes as they are — so give one only where `dtype` is what
  // the model keeps matrices in (random_model checks). The 1-D parameters, and everything
  // when device is null or declines, are made on the host as before. The device's values are
  // random_values' up to the last bit of its logf/cosf (core/random_normal.h).
  explicit RandomWeights(uint64_t seed, DType dtype = DType::f32, Backend* device = nullptr)
      : seed_(seed), dtype_(dtype), device_(device) {}
  Tensor read(const ParamSpec& p, int64_t shard) override;

  // While on, matrices made on a device are kept (process-wide) and handed out again to the
  // next RandomWeights of the same seed, dtype and shard: `linnet bench-sweep` builds many
  // models of one config on one GPU and makes their 16 GB of weights once. Off: forgotten.
  static void keep_device_matrices(bool on);

 private:
  Tensor device_matrix(const ParamSpec& p, int64_t shard);
  uint64_t seed_;
  DType dtype_;
  Backend* device_;
};

}  // namespace linnet
