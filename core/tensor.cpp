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
  LINNET_CHECK(storage_ && offset_ + span_bytes() <= storage_->bytes, "tensor ", describe(), " does not fit its storage");
}

namespace {

// Large blocks (weights, caches) are mapped on their own, 2 MiB aligned and asked to live on
// huge pages: a decode step streams every weight once, and 4 KiB pages would cost a TLB miss
// per page. Mapped, they go back to the system when freed (malloc would keep a load's
// temporaries), and they start as untouched zero pages: a zero block needs no fill, and its
// pages count only once written.
std::shared_ptr<Storage> allocate(size_t bytes, bool zero) {
  auto st = std::make_shared<Storage>();
  st->bytes = bytes;
  constexpr size_t kHuge = size_t{2} << 20;
  if (bytes >= kHuge) {
    const size_t len = (bytes + kHuge - 1) / kHuge * kHuge;
    char* raw = static_cast<char*>(::mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (raw == MAP_FAILED) throw Error(str("out of host memory allocating ", bytes, " bytes"));
    char* p = raw + (kHuge - reinterpret_cast<uintptr_t>(raw) % kHuge) % kHuge;
    if (p > raw) ::munmap(raw, static_cast<size_t>(p - raw));  // trim to the aligned block
    if (p + len < raw + len + kHuge) ::munmap(p + len, static_cast<size_t>(raw + len + kHuge - (p + len)));
    madvise(p, len, MADV_HUGEPAGE);  // advice only: ignored where unsupported
    st->data = p;
    st->release = [len](void* q) { ::munmap(q, len); };
    return st;
  }
  // 64-byte alignment suits SIMD loads; aligned_alloc wants a multiple of the alignment.
  st->data = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (!st->data) throw Error(str("out of host memory allocating ", bytes, " bytes"));
  st->release = [](void* p) { std::free(p); };
  if (zero) std::memset(st->data, 0, bytes);
  return st;
}

void check_dims(const Shape& shape) {
  for (auto d : shape.dims())
    if (d < 0) throw Error(str("negative dimension in shape ", shape.to_string()));
}

}  // namespace

Tensor Tensor::empty(Shape shape, DType dtype) {
  check_dims(shape);
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  return Tensor(allocate(bytes, false), 0, std::move(shape), dtype);
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  check_dims(shape);
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  return Tensor(allocate(bytes, true), 0, std::move(shape), dtype);
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

size_t Tensor::span_bytes() const {
  // (The 4-bit formats by name: this file links without weight_layout.cpp in the sanitizer build.)
  const bool four_bit = storage_ && (storage_->packed_weights == WeightFormat::int4 || storage_->packed_weights == WeightFormat::mxfp4);
  if (!four_bit || rank() != 2) return nbytes();
  return static_cast<size_t>(dim(0) * ((dim(1) + 1) / 2));
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  LINNET_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= dim(0), "rows [", begin, ", ",
               end, ") of ", describe());
  Shape s = shape_;
  s[0] = end - begin;
  const size_t row_bytes = dim(0) ? span_bytes() / static_cast<size_t>(dim(0)) : 0;
  return Tensor(storage_, offset_ + static_cast<size_t>(begin) * row_bytes, s, dtype_);
}

Tensor Tensor::reshape(Shape shape) const {
  LINNET_CHECK(shape.numel() == numel(), "reshape ", describe(), " to ", shape.to_string());
  return Tensor(storage_, offset_, std::move(shape), dtype_);
}

Tensor Tensor::to(DType dtype) const {
  LINNET_CHECK(device() == Device::cpu && !packed(), "to(): row-major host tensors only (a backend's to_host unpacks)");
  Tensor t = empty(shape_, dtype);
  convert(data(), dtype_, t.data(), dtype, static_cast<size_t>(numel()));
  return t;
}

std::vector<float> Tensor::to_floats() const {
  LINNET_CHECK(device() == Device::cpu && !packed(), "to_floats(): row-major host tensors only (a backend's to_host unpacks)");
  std::vector<float> v(static_cast<size_t>(numel()));
  convert(data(), dtype_, v.data(), DType::f32, v.size());
  return v;
}

std::vector<int64_t> Tensor::to_ints() const {
  LINNET_CHECK(device() == Device::cpu && !packed(), "to_ints(): row-major host tensors only (a backend's to_host unpacks)");
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

Tensor stack_rows(const std::vector<Tensor>& parts) {
  LINNET_CHECK(!parts.empty(), "stack_rows of no tensors");
  int64_t rows = 0;
  for (const auto& p : parts) rows += p.dim(0);
  Shape s = parts[0].shape();
  s[0] = rows;
  Tensor out = Tensor::empty(s, parts[0].dtype());
  char* dst = static_cast<char*>(out.data());
  for (const auto& p : parts) {
    LINNET_CHECK(p.dtype() == out.dtype() && p.numel() == p.dim(0) * (out.numel() / std::max<int64_t>(rows, 1)),
                 "stacking ", p.describe(), " onto ", out.describe());
    std::memcpy(dst, p.data(), p.nbytes());
    p.drop_pages();
    dst += p.nbytes();
  }
  return out;
}

}  // namespace linnet
