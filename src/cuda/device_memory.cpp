#include "cuda/device_memory.hpp"

#include <fmt/format.h>

#include <cstdio>

#include "cuda/check.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda {
namespace {

class DeviceBuffer final : public detail::Buffer {
 public:
  DeviceBuffer(void* data, std::size_t bytes, cudaStream_t stream)
      : Buffer(data, bytes), stream_(stream) {}
  ~DeviceBuffer() override {
    if (!data()) return;
    // A destructor cannot throw; a failing free means the device is already broken, and the
    // next checked call reports it.
    if (cudaFreeAsync(data(), stream_) != cudaSuccess) {
      std::fprintf(stderr, "kiln: cudaFreeAsync failed: %s\n",
                   cudaGetErrorString(cudaGetLastError()));
    }
  }

 private:
  cudaStream_t stream_;
};

}  // namespace

std::shared_ptr<detail::Buffer> device_alloc(Context& ctx, std::size_t bytes) {
  if (bytes == 0) return std::make_shared<DeviceBuffer>(nullptr, 0, ctx.stream);
  ctx.make_current();
  void* p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, bytes, ctx.stream);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    // Memory freed by the stream but held in the pool may be fragmented or pending: wait for
    // the stream, hand every unused pool block back to the driver, and try once more.
    KILN_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    KILN_CUDA_CHECK(cudaMemPoolTrimTo(ctx.pool, 0));
    e = cudaMallocAsync(&p, bytes, ctx.stream);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::size_t free = 0, total = 0;
      KILN_CUDA_CHECK(cudaMemGetInfo(&free, &total));
      throw OutOfMemoryError(
          fmt::format("cuda:{}: out of device memory: asked for {} bytes, {} bytes free of {}",
                      ctx.index, bytes, free, total));
    }
  }
  KILN_CUDA_CHECK(e);
  return std::make_shared<DeviceBuffer>(p, bytes, ctx.stream);
}

detail::Handle device_empty(Context& ctx, const Dims& shape, DType dtype) {
  auto t = std::make_shared<detail::TensorImpl>();
  const auto n = detail::numel(shape);
  t->buffer = device_alloc(ctx, static_cast<std::size_t>(n) * dtype_size(dtype));
  t->device = ctx.device;
  t->dtype = dtype;
  t->shape = shape;
  t->strides = detail::contiguous_strides(shape);
  return t;
}

}  // namespace kiln::cuda
