// The dynamic-rank tensor every layer below the front end works with.
//
// Tensors are immutable values: an op never writes into a tensor the user holds, so copies
// share the buffer and views (transpose, slice, expand, ...) are new strides over it.
#pragma once

#include <cstdint>
#include <memory>

#include "kiln/device.hpp"
#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"

namespace kiln::autodiff {
struct Meta;  // src/autodiff/graph.hpp
}

namespace kiln::detail {

// Memory owned by a backend: host memory for the CPU, device memory for CUDA. Every buffer that
// holds memory is counted (kiln::memory_stats); a deferred one (the fusion decorator's, for a
// result not computed yet) gets its memory later through bind() and is not counted itself.
class Buffer {
 public:
  Buffer(void* data, std::size_t bytes);
  virtual ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  // Made by the deferred constructor (a fusion decorator's PendingBuffer).
  bool deferred() const { return !counted_; }

  // Set by the autodiff decorator where these elements need a gradient (a leaf that requires
  // one, or the result of an op recorded for backward); null otherwise, which is what an op on
  // tensors needing no gradient checks. Views share their buffer, hence its gradient.
  std::shared_ptr<autodiff::Meta> autograd;

 protected:
  struct Deferred {};
  Buffer(Deferred, std::size_t bytes) : data_(nullptr), bytes_(bytes), counted_(false) {}
  void bind(void* data) { data_ = data; }

 private:
  void* data_;
  std::size_t bytes_;
  bool counted_ = true;
};

struct TensorImpl {
  std::shared_ptr<Buffer> buffer;
  Device device = Device::cpu();
  DType dtype = DType::f32;
  Dims shape;
  Dims strides;             // in elements; 0 along broadcast (expanded) dimensions
  std::int64_t offset = 0;  // in elements, from buffer->data()

  int rank() const { return static_cast<int>(shape.size()); }
  std::int64_t numel() const;
  bool is_contiguous() const;  // row-major dense, any offset
  // Every element of one block of numel() elements from the offset, once: row-major dense in
  // some order of the dims (contiguous, or transposed, or permuted), any offset.
  bool is_dense() const;
  // The address of element 0 (buffer start plus offset).
  void* data() const {
    return static_cast<char*>(buffer->data()) +
           offset * static_cast<std::int64_t>(dtype_size(dtype));
  }
};

using Handle = std::shared_ptr<const TensorImpl>;

std::int64_t numel(const Dims& shape);
Dims contiguous_strides(const Dims& shape);
// Whether strides lay shape's elements out densely in some order of its dims
// (TensorImpl::is_dense).
bool dense_strides(const Dims& shape, const Dims& strides);

}  // namespace kiln::detail
