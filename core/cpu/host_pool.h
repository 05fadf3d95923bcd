// Blocks of 2 MiB and more (huge pages) for the CPU backend's activations, kept when freed
// and reused by the next request of their size class. glibc hands such blocks back to the
// kernel on free (mmapped ones, or the heap's trimmed top), so without this every step of a
// wide batch faults in and zeroes fresh pages for its activations and logits.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/tensor.h"

namespace linnet {

class HostPool : public std::enable_shared_from_this<HostPool> {
 public:
  static constexpr size_t kLarge = size_t{2} << 20;  // huge-page blocks; malloc reuses smaller ones
  static constexpr size_t kMaxCached = size_t{256} << 20;  // beyond this, freed blocks go back

  // A tensor whose storage comes back here when its last view is gone.
  Tensor empty(const Shape& shape, DType dtype);
  ~HostPool();

 private:
  void release(void* p, size_t bytes);

  std::mutex mu_;
  std::multimap<size_t, void*> free_;  // by size class
  size_t cached_ = 0;
};

}  // namespace linnet
