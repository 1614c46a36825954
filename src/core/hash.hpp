// 64-bit FNV-1a: kiln's one hash, for cache keys (programs, kernel layouts, kernel sources) and
// the store's source index. Not cryptographic: every user compares the keyed thing whole on a hit.
#pragma once

#include <cstdint>
#include <string_view>

namespace kiln::detail {

inline constexpr std::uint64_t kFnvOffset = 1469598103934665603ull;
inline constexpr std::uint64_t kFnvPrime = 1099511628211ull;

// Mixes v into the hash h (FNV-1a's step, on a whole word).
inline void hash_mix(std::uint64_t& h, std::uint64_t v) { h = (h ^ v) * kFnvPrime; }

// FNV-1a of the bytes of s.
inline std::uint64_t hash_bytes(std::string_view s) {
  std::uint64_t h = kFnvOffset;
  for (unsigned char c : s) hash_mix(h, c);
  return h;
}

}  // namespace kiln::detail
