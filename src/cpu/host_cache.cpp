#include "cpu/host_cache.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

namespace kiln::cpu {
namespace {

constexpr std::size_t kAlign = 64;

// Large blocks are rounded to 64 KiB so that nearby sizes share cached blocks.
std::size_t rounded(std::size_t bytes) {
  if (bytes < kMinCached) return bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign;
  return (bytes + kMinCached - 1) / kMinCached * kMinCached;
}

// Blocks of several huge pages are aligned to and backed by transparent huge pages: a pass
// over a large tensor then takes 512x fewer TLB misses.
constexpr std::size_t kHugePage = std::size_t{2} << 20;

void* system_allocate(std::size_t size) {
  if (size < 4 * kHugePage) return std::aligned_alloc(kAlign, size);
  void* p = std::aligned_alloc(kHugePage, (size + kHugePage - 1) / kHugePage * kHugePage);
  if (p) madvise(p, size, MADV_HUGEPAGE);  // advice only: failure leaves normal pages
  return p;
}

class Cache {
 public:
  Cache() {
    // Keep at most an eighth of physical memory (and at most 4 GiB) in freed blocks.
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    std::size_t phys =
        pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page) : std::size_t{1} << 32;
    limit_ = std::min(phys / 8, std::size_t{4} << 30);
  }

  void* take(std::size_t size) {
    std::lock_guard lock(mu_);
    auto it = free_.find(size);
    if (it == free_.end()) return nullptr;
    void* p = it->second;
    free_.erase(it);
    held_ -= size;
    return p;
  }
  // False when the block does not fit: the caller frees it.
  bool give(void* p, std::size_t size) {
    std::lock_guard lock(mu_);
    if (held_ + size > limit_) return false;
    free_.emplace(size, p);
    held_ += size;
    return true;
  }
  void trim() {
    std::lock_guard lock(mu_);
    for (auto& [size, p] : free_) std::free(p);
    free_.clear();
    held_ = 0;
  }
  std::size_t held() {
    std::lock_guard lock(mu_);
    return held_;
  }

 private:
  std::mutex mu_;
  std::multimap<std::size_t, void*> free_;
  std::size_t held_ = 0;
  std::size_t limit_ = 0;
};

// Never destroyed: tensors in static storage may free their blocks after main returns.
Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}

}  // namespace

void* host_allocate(std::size_t bytes) {
  if (bytes > (std::size_t{1} << 62)) return nullptr;
  const std::size_t size = rounded(bytes);
  if (size >= kMinCached) {
    if (void* p = cache().take(size)) return p;
  }
  void* p = system_allocate(size);
  if (!p && size >= kMinCached) {
    cache().trim();  // memory pressure: give the cached blocks back and try once more
    p = system_allocate(size);
  }
  return p;
}

void host_free(void* p, std::size_t bytes) {
  const std::size_t size = rounded(bytes);
  if (size >= kMinCached && cache().give(p, size)) return;
  std::free(p);
}

void host_trim() { cache().trim(); }

std::size_t host_cached_bytes() { return cache().held(); }

}  // namespace kiln::cpu
