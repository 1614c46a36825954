// Random tensors on the CPU: the Philox stream of src/core/philox.hpp, one block of four
// elements at a time, blocks spread over threads. Each element depends only on (seed, index),
// so the result is the same for any thread count.
//
// Built with -ffp-contract=off (CMakeLists.txt): uniform values must round twice, as on CUDA.
#include <cstdint>
#include <string>

#include "core/philox.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/parallel.hpp"
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
    const double mean = spec.a, std = spec.b;
    for_each_block(seed, n, [&](const philox::Counter& w, std::int64_t first, int count) {
      const auto z = philox::normals_from_words(w);
      for (int lane = 0; lane < count; ++lane)
        dst[first + lane] = philox::normal_from_standard(z[lane], mean, std);
    });
  }
}

}  // namespace kiln::cpu
