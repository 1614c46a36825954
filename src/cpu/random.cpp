// Random tensors on the CPU: the Philox stream of src/core/philox.hpp, one block of four
// elements at a time, blocks spread over threads. Each element depends only on (seed, index),
// so the result is the same for any thread count.
//
// Built with -ffp-contract=off (CMakeLists.txt): uniform values must round twice, as on CUDA.
// Normal values use kiln's float Box-Muller (src/ir/box_muller.cuh), whose explicit FMAs are
// library calls unless the compiler may emit FMA instructions: on x86-64 the block loop is built
// twice (target_clones), with FMA and without, and the loader picks by the CPU. The bits are the
// same either way (an FMA rounds once, in hardware or in libm); the time is not: 10 ns a normal
// against 32 on one core of this machine (2026-12-05).
#include <cstdint>
#include <string>

#include "core/philox.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/parallel.hpp"
#include "ir/box_muller.cuh"
#include "kiln/error.hpp"

namespace kiln::cpu {
namespace {

// Blocks per task: 16K elements, enough to hide the scheduling cost of one task.
constexpr std::int64_t kGrainBlocks = 4096;

// Calls fill(block, words, first, count) for every block of out's n elements: count is 4 except
// for a partial last block.
template <class Fill>
void for_each_block(std::uint64_t seed, std::int64_t n, Fill fill) {
  const std::int64_t blocks = (n + 3) / 4;
  parallel_for(blocks, kGrainBlocks, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const auto words = philox::block_words(seed, static_cast<std::uint64_t>(b));
      const std::int64_t first = 4 * b;
      fill(words, first, first + 4 <= n ? 4 : static_cast<int>(n - first));
    }
  });
}

#if defined(__x86_64__) && defined(__GNUC__)
#define KILN_FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define KILN_FMA_CLONES
#endif

// Blocks [b0, b1) of normal(mean, std) into dst (n elements in all).
KILN_FMA_CLONES void normal_blocks(std::uint64_t seed, std::int64_t b0, std::int64_t b1,
                                   std::int64_t n, float mean, float std, float* dst) {
  for (std::int64_t b = b0; b < b1; ++b) {
    const auto w = philox::block_words(seed, static_cast<std::uint64_t>(b));
    float z[4];
    dev::box_muller(w[0], w[1], z[0], z[1]);
    dev::box_muller(w[2], w[3], z[2], z[3]);
    const std::int64_t first = 4 * b;
    const int count = first + 4 <= n ? 4 : static_cast<int>(n - first);
    for (int lane = 0; lane < count; ++lane)
      dst[first + lane] = dev::normal_value(z[lane], mean, std);
  }
}

}  // namespace

void random(const detail::RandomSpec& spec, std::uint64_t seed, const detail::TensorImpl& out) {
  const char* what = spec.kind == detail::RandomSpec::Kind::uniform ? "uniform" : "normal";
  if (out.dtype != DType::f32) {
    throw DTypeError(std::string("random: ") + what + " only fills f32 tensors, got " +
                     dtype_name(out.dtype));
  }
  const std::int64_t n = out.numel();
  if (n == 0) return;
  float* dst = static_cast<float*>(out.data());
  if (spec.kind == detail::RandomSpec::Kind::uniform) {
    const float lo = static_cast<float>(spec.a), hi = static_cast<float>(spec.b);
    for_each_block(seed, n, [&](const philox::Counter& w, std::int64_t first, int count) {
      for (int lane = 0; lane < count; ++lane)
        dst[first + lane] = philox::uniform_from_word(w[lane], lo, hi);
    });
  } else {
    const float mean = static_cast<float>(spec.a), std = static_cast<float>(spec.b);
    parallel_for((n + 3) / 4, kGrainBlocks, [&](std::int64_t b0, std::int64_t b1) {
      normal_blocks(seed, b0, b1, n, mean, std, dst);
    });
  }
}

}  // namespace kiln::cpu
