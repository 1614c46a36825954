// Where a CPU reduction's values come from (src/cpu/reduce.cpp's loops read them through these):
// memory, an element-wise prologue evaluated on demand, or a half-type tensor widened to f32.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "cpu/cpu_evaluator.hpp"
#include "cpu/kernels.hpp"
#include "kiln/dtype.hpp"

namespace kiln::cpu::reduce_sources {

// A source hands each thread a reader; reader.at(off, n, stride) points at the values of
// elements off, off + stride, ..., off + (n - 1) * stride of the reduced tensor's layout (valid
// until the next call), to be read with that same stride. A float source's reader also has
// column_sums(kernels, off, k, step, cols, first, acc): the kernel table's column_sums over the k
// rows of cols values from off, `step` apart (false where the table has no kernel).
template <class T>
struct MemorySource {
  explicit MemorySource(const void* data) : x(static_cast<const T*>(data)) {}
  const T* x;
  struct Reader {
    const T* x;
    const T* at(std::int64_t off, std::int64_t, std::int64_t) const { return x + off; }
    bool column_sums(const KernelTable& kernels, std::int64_t off, std::int64_t k,
                     std::int64_t step, std::int64_t cols, bool first, double* acc) const {
      return kernels.column_sums(DType::f32, x + off, k, step, cols, first, acc);
    }
  };
  Reader reader() const { return {x}; }
};

// The prologue's values, evaluated on demand into the reader's buffer. It always evaluates
// whole blocks of ir::kBlock elements at the positions evaluate_cpu's blocks have, because a
// SIMD kernel may take a per-vector path (Highway's log or the scalar one, say): so every
// value equals the one the unfused group would have written, bit for bit. The blocks last
// evaluated are kept, so that the short rows of a block reuse them.
template <class T>
struct PrologueSource {
  const ir::RangeEvaluator& eval;
  std::int64_t total;  // elements of the reduced tensor
  struct Reader {
    const ir::RangeEvaluator& eval;
    std::int64_t total;
    ir::RangeEvaluator::Scratch scratch;
    std::unique_ptr<T[]> buf;
    std::int64_t capacity = 0, first = 0, last = 0;  // buf holds elements [first, last)
    const T* at(std::int64_t off, std::int64_t n, std::int64_t stride) {
      const std::int64_t end = off + (n > 0 ? (n - 1) * stride + 1 : 0);  // stride > 0
      if (off < first || end > last) {
        first = off / ir::kBlock * ir::kBlock;
        last = std::min(total, (end + ir::kBlock - 1) / ir::kBlock * ir::kBlock);
        if (last - first > capacity) {
          capacity = last - first;
          buf = std::make_unique<T[]>(static_cast<std::size_t>(capacity));
        }
        eval.run(first, last - first, buf.get(), scratch);
      }
      return buf.get() + (off - first);
    }
    bool column_sums(const KernelTable& kernels, std::int64_t off, std::int64_t k,
                     std::int64_t step, std::int64_t cols, bool first, double* acc) {
      return kernels.column_sums(DType::f32, at(off, (k - 1) * step + cols, 1), k, step, cols,
                                 first, acc);
    }
  };
  Reader reader() const { return {eval, total, eval.scratch(), nullptr}; }
};

// A half-type tensor's values widened to f32 (exact) as the loops read them: each request's span
// of memory converted by the kernel table into the reader's buffer. (The prologue path widened
// whole blocks through the evaluator, gathering each into a buffer first: 3 passes for 1.)
template <class T>
struct WidenedSource {
  static_assert(std::is_same_v<T, float>);
  const std::uint16_t* x;
  DType dtype;
  const KernelTable& kernels;
  struct Reader {
    const WidenedSource& s;
    std::vector<float> buf;
    const float* at(std::int64_t off, std::int64_t n, std::int64_t stride) {
      const auto span = static_cast<std::size_t>(n > 0 ? (n - 1) * stride + 1 : 0);
      if (span > buf.size()) buf.resize(span);
      s.kernels.half_to_f32(s.dtype, s.x + off, buf.data(), span);
      return buf.data();
    }
    // The column sums read the half values themselves: no buffer.
    bool column_sums(const KernelTable& kernels, std::int64_t off, std::int64_t k,
                     std::int64_t step, std::int64_t cols, bool first, double* acc) const {
      return kernels.column_sums(s.dtype, s.x + off, k, step, cols, first, acc);
    }
  };
  Reader reader() const { return {*this, {}}; }
};

}  // namespace kiln::cpu::reduce_sources
