// Buffer accounting: how many buffers, and how many bytes, hold memory now and at most
// (kiln::memory_stats).
#include <algorithm>
#include <atomic>

#include "core/tensor_impl.hpp"
#include "kiln/config.hpp"

namespace kiln {
namespace {

std::atomic<long long> live{0};
std::atomic<long long> peak{0};
std::atomic<long long> live_bytes{0};
std::atomic<long long> peak_bytes{0};

// Adds `delta` to `now_` and raises `max_` to the result.
void add(std::atomic<long long>& now_, std::atomic<long long>& max_, long long delta) {
  const long long now = now_.fetch_add(delta, std::memory_order_relaxed) + delta;
  long long p = max_.load(std::memory_order_relaxed);
  while (now > p && !max_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

}  // namespace

namespace detail {

Buffer::Buffer(void* data, std::size_t bytes) : data_(data), bytes_(bytes) {
  add(live, peak, 1);
  add(live_bytes, peak_bytes, static_cast<long long>(bytes));
}

Buffer::~Buffer() {
  if (!counted_) return;
  live.fetch_sub(1, std::memory_order_relaxed);
  live_bytes.fetch_sub(static_cast<long long>(bytes_), std::memory_order_relaxed);
}

}  // namespace detail

MemoryStats memory_stats() {
  return {live.load(std::memory_order_relaxed), peak.load(std::memory_order_relaxed),
          live_bytes.load(std::memory_order_relaxed), peak_bytes.load(std::memory_order_relaxed)};
}

void reset_peak_buffers() {
  peak.store(live.load(std::memory_order_relaxed));
  peak_bytes.store(live_bytes.load(std::memory_order_relaxed));
}

}  // namespace kiln
