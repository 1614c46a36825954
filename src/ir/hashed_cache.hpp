// The cache shape of every "program structure -> compiled thing" lookup: a fused plan
// (src/fusion/plan_cache.cpp), an element-wise kernel (src/cuda/elementwise.cpp), a reduction
// prologue kernel (src/cuda/reduce.cpp).
//
// Entries are found by a 64-bit hash (a program's structure_hash() mixed with whatever else the
// caller keys on) and then compared in full by the caller's predicate, so two keys that share a
// hash never get each other's value, and a lookup builds nothing: no string, no key object.
// Thread-safe; entries are never removed, so a pointer to one stays valid.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/hash.hpp"

namespace kiln::ir {

using detail::hash_mix;

template <class Entry>
class HashedCache {
 public:
  // The entry of bucket `hash` for which matches(entry) is true, or nullptr.
  template <class Match>
  const Entry* find(std::uint64_t hash, Match&& matches) const {
    std::lock_guard lock(mu_);
    const auto it = buckets_.find(hash);
    if (it == buckets_.end()) return nullptr;
    for (const auto& e : it->second)
      if (matches(*e)) return e.get();
    return nullptr;
  }

  // Adds `entry` to bucket `hash` and returns it. (Two threads that missed the same key both add
  // theirs; find returns the first, and both are valid.)
  const Entry& insert(std::uint64_t hash, Entry entry) {
    auto owned = std::make_unique<const Entry>(std::move(entry));
    const Entry& added = *owned;
    std::lock_guard lock(mu_);
    buckets_[hash].push_back(std::move(owned));
    return added;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, std::vector<std::unique_ptr<const Entry>>> buckets_;
};

}  // namespace kiln::ir
