// A cache of freed large host blocks, so a chain of ops reuses its intermediates' memory.
//
// Without it, every 16 MiB intermediate is a fresh mmap: the kernel then pays ~4000 page
// faults and zero-fills the pages before the op can write them, which costs more than the op.
// Blocks below kMinCached go straight to malloc, which already reuses small blocks well.
#pragma once

#include <cstddef>

namespace kiln::cpu {

inline constexpr std::size_t kMinCached = std::size_t{1} << 16;

// A 64-byte aligned block of at least `bytes` (a cached one if one fits), or nullptr when
// the system is out of memory.
void* host_allocate(std::size_t bytes);
// Returns a block from host_allocate(bytes); it is kept for reuse while the cache has room.
void host_free(void* p, std::size_t bytes);
// Frees every cached block (on memory pressure, and for tests).
void host_trim();
// Bytes held in the cache now.
std::size_t host_cached_bytes();

}  // namespace kiln::cpu
