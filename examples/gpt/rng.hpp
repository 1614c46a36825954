// SplitMix64: the example's one source of host-side randomness (which training windows, which
// sampled byte). Specified here rather than taken from <random>, whose distributions differ
// between standard libraries, so one --seed gives the same run everywhere.
#pragma once

#include <cstdint>

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) for n > 0; the modulo bias is below 2^-40 for the n used here (< 2^24).
  std::uint64_t below(std::uint64_t n) { return next() % n; }
  // Uniform in [0, 1), from the top 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};
