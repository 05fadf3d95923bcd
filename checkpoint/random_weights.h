// Deterministic random weights: every element is a function of (seed, tensor name, element
// index), so any shard's slice equals the same rows of the whole tensor, and a checkpoint can
// be written tensor by tensor without holding it in memory.
#pragma once
#include <cstdint>
#include <string>

#include "layers/weight_source.h"

namespace linnet {

// Fills out[0..count) with the values of `name`'s elements [first, first + count).
void random_values(uint64_t seed, const std::string& name, const Shape& full, int64_t first, int64_t count, float* out);

class RandomWeights final : public WeightSource {
 public:
  explicit RandomWeights(uint64_t seed, DType dtype = DType::f32) : seed_(seed), dtype_(dtype) {}
  Tensor read(const ParamSpec& p, int64_t shard) override;

 private:
  uint64_t seed_;
  DType dtype_;
};

}  // namespace linnet
