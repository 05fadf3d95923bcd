// Tensor: a typed, shaped, contiguous view into shared storage (host memory, a memory-mapped
// file, or device memory owned by a backend). Views share the storage; copying a Tensor
// copies the handle, not the data.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/weight_layout.h"

namespace linnet {

enum class Device : uint8_t { cpu, cuda };
const char* device_name(Device d);

// A block of memory and how to release it.
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device = Device::cpu;
  std::function<void(void*)> release;  // empty: not owned
  // > 0: one matrix of this many columns packed for a backend's kernels (the CPU's panels,
  // core/cpu/packed_matmul.h), not row-major: only that backend's ops read it.
  int64_t packed_cols = 0;
  // A quantized matrix (core/cpu/packed_matmul.h; core/cuda/kernels.cuh QuantWeights): its format,
  // the columns a scale covers, the rows held (CPU: whole panels); dense and 0 for the others.
  WeightFormat packed_weights = WeightFormat::dense;
  int64_t packed_block_cols = 0;
  int64_t packed_rows = 0;
  // Its product first rounds x as the format's reference does (WeightLayout::activations).
  ActivationRounding activations;
  // The dtype its dequantized weights are rounded to (WeightLayout::dequant_dtype: GPTQ's
  // fp16); f32: one rounding, none more.
  DType packed_dequant = DType::f32;
  // A quantized matrix on a device (core/cuda: core/quantized_parts.h's rows as they are): its
  // scales a row, and whether a group index (one i32 a column) follows them.
  int64_t packed_groups = 0;
  bool packed_group_index = false;
  // CUDA under LINNET_CUDA_FP8=cublaslt: where in the allocation an FP8 matrix of 128×128 blocks
  // keeps its scales once more in cuBLASLt's layout (core/cuda/matmul_fp8_lt.cuh); 0: none.
  size_t packed_block128_scales = 0;
  // Non-empty: the packed matrix's packed_cols columns read x's columns in this order (−1: a
  // zero column); its product gathers x first. GPTQ's desc_act groups made consecutive
  // (core/cpu/group_order.h); the view's shape keeps the matrix's own columns.
  std::vector<int32_t> column_gather;
  // Non-empty: gives the pages of [p, p + bytes) back to the system, the data staying valid
  // (a read-only file mapping: touched again, they are read again). A loader that has copied
  // a tensor out of the file calls it as it goes, so the weights are not held twice.
  std::function<void(const void* p, size_t bytes)> drop_pages;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (release && data) release(data);
  }
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, size_t offset, Shape shape, DType dtype);

  // New host tensor (uninitialised / zero-filled).
  static Tensor empty(Shape shape, DType dtype);
  static Tensor zeros(Shape shape, DType dtype);
  // Host tensor holding a copy of values converted to dtype.
  static Tensor from_floats(Shape shape, const std::vector<float>& values, DType dtype = DType::f32);
  static Tensor from_ints(Shape shape, const std::vector<int64_t>& values, DType dtype = DType::i32);
  static Tensor scalar_i32(int32_t v) { return from_ints({}, {v}, DType::i32); }
  static Tensor scalar_f32(float v) { return from_floats({}, {v}, DType::f32); }

  bool defined() const { return storage_ != nullptr; }
  // The storage this view shares (for backends making views into one block).
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_[i]; }
  size_t rank() const { return shape_.rank(); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::cpu; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  // The bytes its view spans in its storage: nbytes, but for an int4 matrix (Storage::
  // packed_weights) or MXFP4 one half a byte a value, ⌈cols/2⌉ a row (its rows are views by that measure).
  size_t span_bytes() const;

  void* data() { return static_cast<char*>(storage_->data) + offset_; }
  const void* data() const { return static_cast<const char*>(storage_->data) + offset_; }
  template <class E>
  E* ptr() {
    return static_cast<E*>(data());
  }
  template <class E>
  const E* ptr() const {
    return static_cast<const E*>(data());
  }

  // Rows [begin, end) of dimension 0: a view.
  Tensor rows(int64_t begin, int64_t end) const;
  // Same elements, other shape: a view.
  Tensor reshape(Shape shape) const;

  bool packed() const { return storage_ && storage_->packed_cols > 0; }
  // Gives this view's pages back where its storage can (a mapped file; see Storage): for a
  // loader done copying it. The data stay valid.
  void drop_pages() const {
    if (storage_ && storage_->drop_pages) storage_->drop_pages(data(), nbytes());
  }

  // Host-only helpers (throw for device tensors and packed ones).
  Tensor to(DType dtype) const;             // converted copy
  std::vector<float> to_floats() const;     // any dtype, as f32
  std::vector<int64_t> to_ints() const;     // any dtype, as i64
  Tensor clone() const;                     // deep copy, same dtype

  std::string describe() const;  // "Tensor[2, 3; bf16]"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

// The parts' rows one after another (same dtype and row shape): a new host tensor.
Tensor stack_rows(const std::vector<Tensor>& parts);

}  // namespace linnet
