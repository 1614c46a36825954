// Host memory for CPU tensors.
#include "cpu/host_buffer.hpp"

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <string>

#include "cpu/host_cache.hpp"
#include "kiln/error.hpp"

namespace kiln::cpu {
namespace {

[[noreturn]] void out_of_memory(const std::string& what) {
  throw OutOfMemoryError("cpu: out of host memory: cannot allocate " + what);
}

void* allocate(std::size_t bytes) {
  void* p = host_allocate(bytes);
  if (p == nullptr) out_of_memory(std::to_string(bytes) + " bytes");
  return p;
}

}  // namespace

HostBuffer::HostBuffer(std::size_t bytes) : detail::Buffer(allocate(bytes), bytes) {}

HostBuffer::~HostBuffer() { host_free(data(), bytes()); }

detail::Handle host_empty(const Dims& shape, DType dtype) {
  std::size_t bytes = dtype_size(dtype);
  for (auto e : shape) {
    if (e < 0) throw ShapeError("host_empty: negative extent in shape " + format_dims(shape));
    if (__builtin_mul_overflow(bytes, static_cast<std::size_t>(e), &bytes)) {
      out_of_memory("a " + std::string(dtype_name(dtype)) + " tensor of shape " +
                    format_dims(shape) + " (its byte count overflows)");
    }
  }
  auto impl = std::make_shared<detail::TensorImpl>();
  try {
    impl->buffer = std::make_shared<HostBuffer>(bytes);
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(std::string(e.what()) + " for a " + dtype_name(dtype) +
                           " tensor of shape " + format_dims(shape));
  } catch (const std::bad_alloc&) {
    out_of_memory(std::to_string(bytes) + " bytes for a " + dtype_name(dtype) +
                  " tensor of shape " + format_dims(shape));
  }
  impl->device = Device::cpu();
  impl->dtype = dtype;
  impl->shape = shape;
  impl->strides = detail::contiguous_strides(shape);
  impl->offset = 0;
  return impl;
}

}  // namespace kiln::cpu
