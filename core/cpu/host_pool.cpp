#include "core/cpu/host_pool.h"

#include <sys/mman.h>

#include <cstdlib>

namespace linnet {

namespace {
// Size classes: whole 2 MiB huge pages, rounded up to 1/8 steps of the power of two below.
size_t size_class(size_t bytes) {
  size_t p = HostPool::kLarge;
  while (p * 2 <= bytes) p *= 2;
  const size_t step = p / 8;
  return (bytes + step - 1) / step * step;
}
}  // namespace

Tensor HostPool::empty(const Shape& shape, DType dtype) {
  for (auto d : shape.dims())
    if (d < 0) throw Error(str("negative dimension in shape ", shape.to_string()));
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  if (bytes < kLarge) return Tensor::empty(shape, dtype);
  const size_t cls = size_class(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = free_.find(cls); it != free_.end()) {
      p = it->second;
      free_.erase(it);
      cached_ -= cls;
    }
  }
  if (!p) {
    // aligned_alloc wants a size that is a multiple of the alignment (C11; AddressSanitizer
    // holds glibc to it): the block is rounded up to whole 2 MiB huge pages.
    constexpr size_t kHuge = size_t{2} << 20;
    p = std::aligned_alloc(kHuge, (cls + kHuge - 1) / kHuge * kHuge);
    if (!p) throw Error(str("out of host memory allocating ", bytes, " bytes"));
    madvise(p, cls, MADV_HUGEPAGE);
  }
  auto st = std::make_shared<Storage>();
  st->data = p;
  st->bytes = cls;
  st->release = [pool = shared_from_this(), cls](void* q) { pool->release(q, cls); };
  return Tensor(std::move(st), 0, shape, dtype);
}

void HostPool::release(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cached_ + bytes > kMaxCached) {
    std::free(p);
    return;
  }
  free_.emplace(bytes, p);
  cached_ += bytes;
}

HostPool::~HostPool() {
  for (auto& [bytes, p] : free_) std::free(p);
}

}  // namespace linnet
