// The process-wide draw sequence of kiln/nn/init.hpp. The seeds are spread by a SplitMix64 step,
// so that consecutive draws (seed, seed + 1) get unrelated Philox streams.
#include "kiln/nn/init.hpp"

#include <atomic>

namespace kiln::nn {
namespace {

std::atomic<std::uint64_t> counter{0x5eed};

}  // namespace

void manual_seed(std::uint64_t seed) { counter.store(seed); }

std::uint64_t next_seed() {
  std::uint64_t z = counter.fetch_add(0x9e3779b97f4a7c15ULL) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace kiln::nn
