// Device memory from CUDA's stream-ordered allocator.
//
// Buffers come from cudaMallocAsync on the device's stream, out of its default pool (which
// keeps freed memory: context.cpp), and go back with cudaFreeAsync on the same stream when the
// last tensor handle drops them, so a free never waits for the GPU and memory is reused in
// stream order.
#pragma once

#include <cstddef>
#include <memory>

#include "core/tensor_impl.hpp"
#include "cuda/context.hpp"

namespace kiln::cuda {

// `bytes` of device memory (nullptr for 0 bytes). OutOfMemoryError, naming the bytes asked for
// and free, if the pool cannot provide them even after trimming it.
std::shared_ptr<detail::Buffer> device_alloc(Context& ctx, std::size_t bytes);

// A new contiguous device tensor of `shape` and `dtype`, contents unspecified.
detail::Handle device_empty(Context& ctx, const Dims& shape, DType dtype);

}  // namespace kiln::cuda
