// Random tensors on the CPU: the Philox stream of src/core/philox.hpp, one block of four
// elements at a time, blocks spread over threads; f32, or bf16 and f16 rounded once from the f32
// draw (the values of the f32 tensor of the same seed, cast). Each element depends only on (seed,
// index), so the result is the same for any thread count.
//
// Built with -ffp-contract=off (CMakeLists.txt): uniform values must round twice, as on CUDA.
// Normal values use kiln's float Box-Muller (src/ir/box_muller.cuh), whose explicit FMAs are
// library calls unless the compiler may emit FMA instructions: on x86-64 the block loop is built
// twice (target_clones), with FMA and without, and the loader picks by the CPU. The bits are the
// same either way (an FMA rounds once, in hardware or in libm); the time is not: 10 ns a normal
// against 32 on one core of this machine (2026-12-05).
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/philox.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/parallel.hpp"
#include "ir/box_muller.cuh"
#include "kiln/error.hpp"
#include "kiln/half.hpp"

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

// Blocks [b0, b1) of normal(mean, std) into dst, which holds the elements from 4 * b0 on (n
// elements in all).
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
      dst[first - 4 * b0 + lane] = dev::normal_value(z[lane], mean, std);
  }
}

// Fills dst (n elements of T: float, or a half type that each f32 draw is rounded to once).
template <class T>
void fill(const detail::RandomSpec& spec, std::uint64_t seed, std::int64_t n, T* dst) {
  if (spec.kind == detail::RandomSpec::Kind::uniform) {
    const float lo = static_cast<float>(spec.a), hi = static_cast<float>(spec.b);
    for_each_block(seed, n, [&](const philox::Counter& w, std::int64_t first, int count) {
      for (int lane = 0; lane < count; ++lane)
        dst[first + lane] = T(philox::uniform_from_word(w[lane], lo, hi));
    });
    return;
  }
  const float mean = static_cast<float>(spec.a), std = static_cast<float>(spec.b);
  parallel_for((n + 3) / 4, kGrainBlocks, [&](std::int64_t b0, std::int64_t b1) {
    if constexpr (std::is_same_v<T, float>) {
      normal_blocks(seed, b0, b1, n, mean, std, dst + 4 * b0);
    } else {
      // Through a float buffer on the stack, a slice of blocks at a time.
      constexpr std::int64_t kSlice = 256;
      float buf[4 * kSlice];
      for (std::int64_t s = b0; s < b1; s += kSlice) {
        const std::int64_t e = std::min(b1, s + kSlice);
        normal_blocks(seed, s, e, n, mean, std, buf);
        const std::int64_t count = std::min(4 * e, n) - 4 * s;
        for (std::int64_t i = 0; i < count; ++i) dst[4 * s + i] = T(buf[i]);
      }
    }
  });
}

}  // namespace

void random(const detail::RandomSpec& spec, std::uint64_t seed, const detail::TensorImpl& out) {
  const std::int64_t n = out.numel();
  switch (out.dtype) {
    case DType::f32:
      if (n > 0) fill(spec, seed, n, static_cast<float*>(out.data()));
      return;
    case DType::bf16:
      if (n > 0) fill(spec, seed, n, static_cast<bfloat16*>(out.data()));
      return;
    case DType::f16:
      if (n > 0) fill(spec, seed, n, static_cast<float16*>(out.data()));
      return;
    case DType::i32:
    case DType::boolean:
      break;
  }
  throw DTypeError(std::string("random: ") +
                   (spec.kind == detail::RandomSpec::Kind::uniform ? "uniform" : "normal") +
                   " fills f32, bf16 and f16 tensors, got " + dtype_name(out.dtype));
}

}  // namespace kiln::cpu
