#include "cuda/device_memory.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <deque>
#include <mutex>
#include <vector>

#include "cuda/check.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda {
namespace {

// One device's freed blocks awaiting reuse, oldest first.
class KeptBlocks {
 public:
  // A kept block of exactly `bytes`, newest first, or nullptr.
  void* take(std::size_t bytes) {
    std::lock_guard lock(mu_);
    for (std::size_t i = blocks_.size(); i-- > 0;) {
      if (blocks_[i].bytes != bytes) continue;
      void* p = blocks_[i].data;
      blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i));
      bytes_ -= bytes;
      return p;
    }
    return nullptr;
  }
  // Keeps the block, handing the oldest back to the pool while over the limits.
  void keep(void* p, std::size_t bytes, cudaStream_t stream) {
    std::lock_guard lock(mu_);
    if (bytes > kKeptBytes) return free_async(p, stream);
    blocks_.push_back({p, bytes});
    bytes_ += bytes;
    while (blocks_.size() > kKeptBlocks || bytes_ > kKeptBytes) {
      free_async(blocks_.front().data, stream);
      bytes_ -= blocks_.front().bytes;
      blocks_.erase(blocks_.begin());
    }
  }
  // Hands every kept block back to the pool.
  void release(cudaStream_t stream) {
    std::lock_guard lock(mu_);
    for (const Block& b : blocks_) free_async(b.data, stream);
    blocks_.clear();
    bytes_ = 0;
  }
  KeptMemory size() {
    std::lock_guard lock(mu_);
    return {blocks_.size(), bytes_};
  }

 private:
  struct Block {
    void* data;
    std::size_t bytes;
  };
  static void free_async(void* p, cudaStream_t stream) {
    // Called from destructors, which cannot throw; a failing free means the device is already
    // broken, and the next checked call reports it.
    if (cudaFreeAsync(p, stream) != cudaSuccess) {
      std::fprintf(stderr, "kiln: cudaFreeAsync failed: %s\n",
                   cudaGetErrorString(cudaGetLastError()));
    }
  }

  std::mutex mu_;
  std::vector<Block> blocks_;
  std::size_t bytes_ = 0;
};

// By device index; never destroyed (buffers freed during static destruction still come here).
KeptBlocks& kept(const Context& ctx) {
  struct Devices {
    std::mutex mu;
    std::deque<KeptBlocks> kept;
  };
  static auto* devices = new Devices;
  std::lock_guard lock(devices->mu);
  while (devices->kept.size() <= static_cast<std::size_t>(ctx.index)) devices->kept.emplace_back();
  return devices->kept[static_cast<std::size_t>(ctx.index)];
}

class DeviceBuffer final : public detail::Buffer {
 public:
  DeviceBuffer(void* data, std::size_t bytes, KeptBlocks& kept, cudaStream_t stream)
      : Buffer(data, bytes), kept_(kept), stream_(stream) {}
  ~DeviceBuffer() override {
    if (data()) kept_.keep(data(), bytes(), stream_);
  }

 private:
  KeptBlocks& kept_;
  cudaStream_t stream_;
};

}  // namespace

std::shared_ptr<detail::Buffer> device_alloc(Context& ctx, std::size_t bytes) {
  ctx.make_current();  // (callers rely on it, whichever way the memory comes)
  KeptBlocks& blocks = kept(ctx);
  if (bytes == 0) return std::make_shared<DeviceBuffer>(nullptr, 0, blocks, ctx.stream);
  if (void* p = blocks.take(bytes))
    return std::make_shared<DeviceBuffer>(p, bytes, blocks, ctx.stream);
  void* p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, bytes, ctx.stream);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    // Memory freed by the stream but held here or in the pool may be fragmented or pending:
    // hand the kept blocks back, wait for the stream, hand every unused pool block back to the
    // driver, and try once more.
    blocks.release(ctx.stream);
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
  return std::make_shared<DeviceBuffer>(p, bytes, blocks, ctx.stream);
}

KeptMemory kept_memory(const Context& ctx) { return kept(ctx).size(); }

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
