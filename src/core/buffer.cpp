// Buffer accounting: how many buffers hold memory now and at most (kiln::memory_stats).
#include <algorithm>
#include <atomic>

#include "core/tensor_impl.hpp"
#include "kiln/config.hpp"

namespace kiln {
namespace {

std::atomic<long long> live{0};
std::atomic<long long> peak{0};

}  // namespace

namespace detail {

Buffer::Buffer(void* data, std::size_t bytes) : data_(data), bytes_(bytes) {
  const long long now = live.fetch_add(1, std::memory_order_relaxed) + 1;
  long long p = peak.load(std::memory_order_relaxed);
  while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

Buffer::~Buffer() {
  if (counted_) live.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace detail

MemoryStats memory_stats() {
  return {live.load(std::memory_order_relaxed), peak.load(std::memory_order_relaxed)};
}

void reset_peak_buffers() { peak.store(live.load(std::memory_order_relaxed)); }

}  // namespace kiln
