// The buffer of a tensor the fusion decorator has recorded but not computed yet.
//
// It holds no memory until its group runs. If the user drops the last handle first, the buffer
// dies with it and the group keeps the value in registers; if a handle is still alive when the
// group runs, the decorator binds real memory from the backend below and the kernel writes it.
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor_impl.hpp"

namespace kiln::fusion {

class PendingBuffer final : public detail::Buffer {
 public:
  PendingBuffer(const Dims& shape, DType dtype)
      : Buffer(Deferred{}, static_cast<std::size_t>(detail::numel(shape)) * dtype_size(dtype)),
        shape_(shape),
        dtype_(dtype) {}

  bool bound() const { return storage_ != nullptr; }
  // Gives the buffer its memory (a contiguous buffer of shape() x dtype() from the backend).
  void bind(std::shared_ptr<detail::Buffer> storage) {
    Buffer::bind(storage->data());
    storage_ = std::move(storage);
  }
  const Dims& shape() const { return shape_; }
  DType dtype() const { return dtype_; }

  // While unbound and recorded: the group (by serial number) and the node that compute it.
  std::uint64_t group = 0;
  std::int32_t node = -1;

 private:
  Dims shape_;
  DType dtype_;
  std::shared_ptr<detail::Buffer> storage_;
};

// t's buffer if the decorator made it and it has no memory yet, else nullptr.
inline PendingBuffer* unbound(const detail::TensorImpl& t) {
  auto* p = dynamic_cast<PendingBuffer*>(t.buffer.get());
  return p && !p->bound() ? p : nullptr;
}

}  // namespace kiln::fusion
