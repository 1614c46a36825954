// Host memory for CPU tensors: 64-byte aligned, so SIMD loads of contiguous data align.
#pragma once

#include <cstddef>
#include <memory>

#include "core/tensor_impl.hpp"

namespace kiln::cpu {

class HostBuffer final : public detail::Buffer {
 public:
  explicit HostBuffer(std::size_t bytes);
  ~HostBuffer() override;
};

// A new contiguous CPU tensor with unspecified contents.
detail::Handle host_empty(const Dims& shape, DType dtype);

}  // namespace kiln::cpu
