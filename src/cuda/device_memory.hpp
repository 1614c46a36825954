// Device memory from CUDA's stream-ordered allocator, with the last few freed blocks kept.
//
// Buffers come from cudaMallocAsync on the device's stream, out of its default pool (which
// keeps freed memory: context.cpp), and go back in stream order when the last tensor handle
// drops them, so a free never waits for the GPU. A freed block is first kept here, on the host,
// for the next request of exactly its size: every kiln op of a device is queued on its one
// stream, so a block freed after its last use was queued can serve any op queued later. That
// skips the pair cudaMallocAsync + cudaFreeAsync, which costs the host 1.0-1.3 us (H200
// machine, 2026-12-03, bench/probes/host_costs.cpp): as much as the rest of a fused group's
// own host work. A loop, which frees and asks for the same sizes each iteration, hits it.
// At most kKeptBlocks blocks and kKeptBytes bytes are kept (the oldest go back to the pool
// first), and all of them go back before an allocation that fails is retried.
#pragma once

#include <cstddef>
#include <memory>

#include "core/tensor_impl.hpp"
#include "cuda/context.hpp"

namespace kiln::cuda {

inline constexpr std::size_t kKeptBlocks = 8;
inline constexpr std::size_t kKeptBytes = std::size_t{256} << 20;

// `bytes` of device memory (nullptr for 0 bytes). OutOfMemoryError, naming the bytes asked for
// and free, if the pool cannot provide them even after trimming it.
std::shared_ptr<detail::Buffer> device_alloc(Context& ctx, std::size_t bytes);

// A new contiguous device tensor of `shape` and `dtype`, contents unspecified.
detail::Handle device_empty(Context& ctx, const Dims& shape, DType dtype);

// The blocks kept for reuse on ctx's device now, and their bytes (for the tests).
struct KeptMemory {
  std::size_t blocks = 0, bytes = 0;
};
KeptMemory kept_memory(const Context& ctx);

}  // namespace kiln::cuda
