// 64-bit FNV-1a (on words): kiln's one hash, for cache keys (programs, kernel layouts, kernel
// sources) and the store's source index. Not cryptographic: every user compares the keyed thing
// whole on a hit.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace kiln::detail {

inline constexpr std::uint64_t kFnvOffset = 1469598103934665603ull;
inline constexpr std::uint64_t kFnvPrime = 1099511628211ull;

// Mixes v into the hash h (FNV-1a's step, on a whole word).
inline void hash_mix(std::uint64_t& h, std::uint64_t v) { h = (h ^ v) * kFnvPrime; }

// FNV-1a's step on 8-byte words in eight lanes (eight independent chains of multiplies, which the
// processor overlaps), then the tail's bytes, each lane folded and the length: a row kernel's
// 50 KB source hashes in a few microseconds where a byte at a time took about 60, and the CUDA
// backend hashes a kernel's source at each launch (src/cuda/nvrtc_compiler.cpp's cached_kernel).
inline std::uint64_t hash_bytes(std::string_view s) {
  std::uint64_t lane[8];
  for (int k = 0; k < 8; ++k) lane[k] = kFnvOffset + static_cast<std::uint64_t>(k);
  std::size_t i = 0;
  for (; i + 64 <= s.size(); i += 64) {
    for (int k = 0; k < 8; ++k) {
      std::uint64_t w;
      std::memcpy(&w, s.data() + i + 8 * k, sizeof w);
      hash_mix(lane[k], w);
    }
  }
  std::uint64_t h = kFnvOffset;
  for (; i < s.size(); ++i) hash_mix(h, static_cast<unsigned char>(s[i]));
  for (std::uint64_t l : lane) hash_mix(h, l ^ l >> 32);
  hash_mix(h, s.size());
  return h;
}

}  // namespace kiln::detail
