// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the
// counter-based generator of Random123, cuRAND and JAX, and kiln's mapping from (seed, element
// index) to uniform and normal values.
//
// Every device computes element i of a random tensor from (seed, i) alone, so a tensor is the
// same whatever the thread count, the chunking or the device. The code uses nothing but 32-bit
// unsigned integer arithmetic, one 64-bit multiply for mulhi/mullo, and (for the values) plain
// IEEE float/double operations, so that the CUDA code generator can emit the same statements.
//
// The mapping (the contract every backend implements bit for bit):
//   block b = i / 4, lane = i % 4;
//   words = philox4x32_10(counter {lo32(b), hi32(b), 0, 0}, key {lo32(seed), hi32(seed)});
//   uniform(lo, hi), in float:  u = float(words[lane] >> 8) * 2^-24        (exact, in [0, 1))
//                               d = float(hi) - float(lo);  p = d * u;  v = float(lo) + p
//                               if v >= float(hi) and float(hi) > float(lo): v = the largest
//                               float below float(hi)   (rounding of lo + p can reach hi)
//     Two roundings, never one fused multiply-add: a TU that computes these values must be
//     built with -ffp-contract=off (CMakeLists.txt sets it for src/cpu/random.cpp; CUDA code
//     must use __fmul_rn/__fadd_rn).
//   normal(mean, std), Box-Muller in float over the block's word pairs (w0, w1), (w2, w3):
//     lanes 0, 1 are r cos t, r sin t with r = sqrt(-2 log u1), u1 = (w0 + 1) 2^-32 in (0, 1]
//     (so log never sees 0), t = 2 pi w1 2^-32; lanes 2, 3 the same from (w2, w3);
//     value = fma(float(std), n, float(mean)). log, sin and cos are kiln's own float functions
//     (src/ir/box_muller.cuh), built from IEEE float operations and FMAs alone, so normal values
//     agree exactly across devices, as uniform values do.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::philox {

using Counter = std::array<std::uint32_t, 4>;
using Key = std::array<std::uint32_t, 2>;

// The multipliers and Weyl key increments of the Philox 4x32 reference.
inline constexpr std::uint32_t kMul0 = 0xD2511F53u;
inline constexpr std::uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
inline constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

// The high and low halves of the 64-bit product a * b.
constexpr void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

// Ten rounds; the key is bumped between rounds (nine times), as the reference does.
constexpr Counter philox4x32_10(Counter c, Key k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kWeyl0;
      k[1] += kWeyl1;
    }
    std::uint32_t hi0 = 0, lo0 = 0, hi1 = 0, lo1 = 0;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = Counter{hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

// The four words of block b (elements 4b .. 4b + 3) of the stream of `seed`.
constexpr Counter block_words(std::uint64_t seed, std::uint64_t block) {
  return philox4x32_10(
      Counter{static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), 0, 0},
      Key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
}

// A uniform float in [lo, hi) from one word (see the mapping above).
inline float uniform_from_word(std::uint32_t w, float lo, float hi) {
  const float u = static_cast<float>(w >> 8) * 0x1p-24f;
  // Separate statements document the two roundings; -ffp-contract=off is what guarantees them.
  const float d = hi - lo;
  const float p = d * u;
  const float v = lo + p;
  if (v >= hi && hi > lo) return std::nextafter(hi, -std::numeric_limits<float>::infinity());
  return v;
}

// Element i of uniform(lo, hi) for `seed`: the reference, one element at a time.
inline float uniform_at(std::uint64_t seed, std::uint64_t i, float lo, float hi) {
  return uniform_from_word(block_words(seed, i / 4)[i % 4], lo, hi);
}

}  // namespace kiln::philox
