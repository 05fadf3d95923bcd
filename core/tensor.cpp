#include "core/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

namespace linnet {

std::string Shape::to_string() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "]";
}

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

Tensor::Tensor(std::shared_ptr<Storage> storage, size_t offset, Shape shape, DType dtype)
    : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)), dtype_(dtype) {
  for (auto d : shape_.dims()) LINNET_CHECK(d >= 0, "negative dimension in ", shape_.to_string());
  LINNET_CHECK(storage_ && offset_ + nbytes() <= storage_->bytes, "tensor ", describe(),
               " does not fit its storage");
}

Tensor Tensor::empty(Shape shape, DType dtype) {
  for (auto d : shape.dims())
    if (d < 0) throw Error(str("negative dimension in shape ", shape.to_string()));
  auto st = std::make_shared<Storage>();
  st->bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  // 64-byte alignment suits SIMD loads; aligned_alloc wants a multiple of the alignment.
  // Large blocks (weights, caches) are 2 MiB aligned and asked to live on huge pages: a
  // decode step streams every weight once, and 4 KiB pages would cost a TLB miss per page.
  constexpr size_t kHuge = size_t{2} << 20;
  const bool huge = st->bytes >= kHuge;
  const size_t align = huge ? kHuge : 64;
  const size_t alloc = ((st->bytes + align - 1) / align) * align + (huge ? 0 : 64);
  st->data = std::aligned_alloc(align, alloc);
  if (!st->data) throw Error(str("out of host memory allocating ", st->bytes, " bytes"));
  if (huge) madvise(st->data, alloc, MADV_HUGEPAGE);  // advice only: ignored where unsupported
  st->release = [](void* p) { std::free(p); };
  return Tensor(std::move(st), 0, std::move(shape), dtype);
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  std::memset(t.data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::from_floats(Shape shape, const std::vector<float>& values, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  LINNET_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "value count ", values.size(),
               " does not match ", t.describe());
  convert(values.data(), DType::f32, t.data(), dtype, values.size());
  return t;
}

Tensor Tensor::from_ints(Shape shape, const std::vector<int64_t>& values, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  LINNET_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "value count ", values.size(),
               " does not match ", t.describe());
  convert(values.data(), DType::i64, t.data(), dtype, values.size());
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  LINNET_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= dim(0), "rows [", begin, ", ",
               end, ") of ", describe());
  Shape s = shape_;
  s[0] = end - begin;
  const size_t row_bytes = dim(0) ? nbytes() / static_cast<size_t>(dim(0)) : 0;
  return Tensor(storage_, offset_ + static_cast<size_t>(begin) * row_bytes, s, dtype_);
}

Tensor Tensor::reshape(Shape shape) const {
  LINNET_CHECK(shape.numel() == numel(), "reshape ", describe(), " to ", shape.to_string());
  return Tensor(storage_, offset_, std::move(shape), dtype_);
}

Tensor Tensor::to(DType dtype) const {
  LINNET_CHECK(device() == Device::cpu, "to(): host tensors only");
  Tensor t = empty(shape_, dtype);
  convert(data(), dtype_, t.data(), dtype, static_cast<size_t>(numel()));
  return t;
}

std::vector<float> Tensor::to_floats() const {
  LINNET_CHECK(device() == Device::cpu, "to_floats(): host tensors only");
  std::vector<float> v(static_cast<size_t>(numel()));
  convert(data(), dtype_, v.data(), DType::f32, v.size());
  return v;
}

std::vector<int64_t> Tensor::to_ints() const {
  LINNET_CHECK(device() == Device::cpu, "to_ints(): host tensors only");
  std::vector<int64_t> v(static_cast<size_t>(numel()));
  convert(data(), dtype_, v.data(), DType::i64, v.size());
  return v;
}

Tensor Tensor::clone() const { return to(dtype_); }

std::string Tensor::describe() const {
  std::string s = "Tensor[";
  for (size_t i = 0; i < rank(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + "; " + dtype_name(dtype_) + "]";
}

}  // namespace linnet
