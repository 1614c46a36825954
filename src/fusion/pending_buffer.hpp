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
  PendingBuffer(std::int64_t numel, DType dtype)
      : Buffer(Deferred{}, static_cast<std::size_t>(numel) * dtype_size(dtype)),
        numel_(numel),
        dtype_(dtype) {}

  bool bound() const { return storage_ != nullptr; }
  // Gives the buffer its memory (numel() elements of dtype() from the backend below).
  void bind(std::shared_ptr<detail::Buffer> storage) {
    Buffer::bind(storage->data());
    storage_ = std::move(storage);
  }
  std::int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }

  // While unbound and recorded: the group (by serial number) and the node that compute it.
  std::uint64_t group = 0;
  std::int32_t node = -1;

 private:
  std::int64_t numel_;
  DType dtype_;
  std::shared_ptr<detail::Buffer> storage_;
};

// t's buffer if the decorator made it and it has no memory yet, else nullptr.
inline PendingBuffer* unbound(const detail::TensorImpl& t) {
  // Only PendingBuffer uses the deferred constructor, so the cast is safe (and much cheaper
  // than a dynamic_cast on every operand of every recorded op).
  if (!t.buffer || !t.buffer->deferred()) return nullptr;
  auto* p = static_cast<PendingBuffer*>(t.buffer.get());
  return p->bound() ? nullptr : p;
}

}  // namespace kiln::fusion
