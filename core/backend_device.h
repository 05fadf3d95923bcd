// Device concerns, apart from the ops (core/backend.h): what the backend is, its memory and
// transfers, its stream, timers and counters. A Backend is one (its ops run on this device).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "core/weight_layout.h"

namespace linnet {

// Time spent by work the backend runs between start() and stop(), summed over the pairs:
// on a device, events on its stream (nothing waits while timing); on the CPU, the clock.
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
  virtual double seconds() = 0;  // waits for the last stop; all pairs so far
  virtual void reset() = 0;
};

class BackendDevice {
 public:
  virtual ~BackendDevice() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  // Dtype of activations and the KV cache when weights are in `weights`.
  virtual DType compute_dtype(DType weights) const = 0;
  // Dtype the matrix weights (embedding, Linear) are kept in when the run's T is `t`; the
  // 1-D ones (norms, biases) are kept in compute_dtype(t).
  virtual DType weight_dtype(DType t) const { return compute_dtype(t); }
  // Whether its products take matrices stored in format f (core/weight_layout.h); the loader
  // refuses a checkpoint whose format it does not (check_weight_layouts).
  virtual bool supports(WeightFormat f) const { return f == WeightFormat::dense; }
  // Whether it keeps a KV cache in `cache` beside activations in `compute` (--kv-cache-dtype).
  virtual bool supports_cache(DType cache, DType compute) const { return cache == compute; }

  // ---- memory ----
  virtual Tensor empty(const Shape& shape, DType dtype) = 0;
  virtual Tensor upload(const Tensor& host) = 0;  // copy onto the device (may alias on cpu)
  virtual Tensor to_host(const Tensor& t) = 0;    // host copy; waits for pending work
  // A matrix weight (a Linear's or the embedding's [rows, cols]) laid out once for the
  // backend's products; to_host gives it back row-major. Same as upload where nothing is gained.
  virtual Tensor upload_matrix(const Tensor& host) { return upload(host); }
  // The parts' rows stacked into one matrix (q|k|v, gate|up), laid out as upload_matrix does.
  virtual Tensor upload_matrix(const std::vector<Tensor>& parts);
  // A quantized matrix (layout.format not dense; see supports) from its parts as stored, each
  // its values (FP8: f8_e4m3 [rows, cols]) and scales (f32 [⌈rows/br⌉, ⌈cols/bc⌉] for the
  // layout's br × bc blocks), stacked by rows and laid out for this backend's product: matmul
  // takes it as w. Backends without quantized kernels refuse it.
  // int4: data i32 [rows, ⌈cols/8⌉] (eight 4-bit values a word, the first in the low bits,
  // each stored +8 as compressed-tensors packs them), scales f32 [rows, groups], zero points
  // (asymmetric) i32 [⌈rows/8⌉, groups] packed alike along the rows.
  struct QuantizedPart {
    Tensor data;
    Tensor scales;
    Tensor zero_points;  // undefined: symmetric
    int64_t cols = 0;    // the matrix's columns (packed values do not tell)
    // Undefined: the groups in order (column c in group c / group). Else i32 [cols], each
    // column's group (GPTQ's desc_act, compressed-tensors' actorder "group"); the scales and zero
    // points then hold every group of the matrix, and every part of it has the same.
    Tensor group_index;
    // Static activations (WeightLayout::activations.stored): f32 [1], the layer's input_scale.
    Tensor input_scale;
  };
  virtual Tensor upload_quantized_matrix(const std::vector<QuantizedPart>& parts, const WeightLayout& layout);
  // The name of the layout upload_matrix gives (a packed file saved in it is taken as it is:
  // upload_matrix of a tensor already in it returns that tensor); "" where it is row-major.
  virtual std::string packed_format() const { return ""; }
  // Several at once: one staged copy each way on a device (a decode step's control arrays go
  // up in one transfer; its choices come back with one wait).
  virtual std::vector<Tensor> upload_many(const std::vector<Tensor>& hosts) {
    std::vector<Tensor> out;
    for (const auto& h : hosts) out.push_back(upload(h));
    return out;
  }
  virtual std::vector<Tensor> to_host_many(const std::vector<Tensor>& ts) {
    std::vector<Tensor> out;
    for (const auto& t : ts) out.push_back(to_host(t));
    return out;
  }
  // dst (on this device) = host (same dtype and element count): the way back for staged collectives.
  virtual void copy_from_host(const Tensor& host, Tensor& dst) {
    (void)host;
    (void)dst;
    throw Error(str("backend ", name(), " cannot copy from the host"));
  }
  virtual void fill_zero(Tensor& t) = 0;
  // A new zero tensor (the KV cache): on the CPU fresh zero pages, held only once written.
  virtual Tensor zeros(const Shape& shape, DType dtype) {
    Tensor t = empty(shape, dtype);
    fill_zero(t);
    return t;
  }
  virtual void synchronize() = 0;
  // Bytes this device can still give (free host RAM under any cgroup limit; free GPU
  // memory plus this backend's cached blocks): the loader checks a model fits before it loads.
  virtual int64_t memory_available() const = 0;
  // Gives cached free blocks back to the device (for a library that allocates on its own —
  // NCCL at setup — and failed for want of memory the cache held).
  virtual void release_cached_memory() {}
  // The device's stream (cudaStream_t) and index, for a device communicator ordered with
  // the compute; null / −1 on the CPU.
  virtual void* stream_handle() const { return nullptr; }
  virtual int device_index() const { return -1; }
  // What identifies the device across the machines of a job (a GPU's UUID); "" on the CPU.
  virtual std::string device_id() const { return ""; }
  // A timer for this backend's work (the host clock where work is synchronous).
  virtual std::unique_ptr<DeviceTimer> make_timer();
  // A tuned library's matrix rate (FLOP/s) on this device for dtype dt — the ceiling
  // `linnet bench` holds prefill to — and which library ("" and 0 where there is none).
  virtual double library_matmul_rate(DType, std::string* source) {
    if (source) source->clear();
    return 0;
  }
  // out ([rows, cols], a float dtype, on this device) = random weights made where they live:
  // element (r, c) = mean + scale · z(key, base + r·stride + c), z the standard normal of
  // core/random_normal.h. False where the backend has no such kernel (the caller makes them on
  // the host instead).
  virtual bool random_normal(Tensor& out, uint64_t key, int64_t base, int64_t stride, float mean, float scale) {
    (void)out, (void)key, (void)base, (void)stride, (void)mean, (void)scale;
    return false;
  }
  // Enqueues on the stream whatever the backend has recorded and not yet launched (the CUDA
  // backend records a step's launches to replay them as one graph). Code that enqueues work on
  // stream_handle() itself (a NCCL collective) calls this first, so its work lands after them.
  virtual void flush() {}
  // What the backend counted so far (graph replays and captures, …), for reports.
  virtual std::vector<std::pair<std::string, int64_t>> counters() const { return {}; }

};

}  // namespace linnet
