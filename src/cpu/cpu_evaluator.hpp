// Runs an element-wise Program on the CPU, blockwise.
//
// The output index space is cut into blocks of kBlock elements (a few pages, so every live
// value of a block stays in L1/L2). Each block evaluates the program node by node with one
// SIMD pass per node (numexpr's scheme): a fused chain reads each input once and writes each
// output once, whatever its length. Blocks run in parallel on oneTBB.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/tensor_impl.hpp"
#include "cpu/kernels.hpp"
#include "ir/program.hpp"

namespace kiln::ir {

inline constexpr std::int64_t kBlock = 4096;

// Every input and output has the same shape (broadcast inputs carry stride-0 dims); outputs
// may be strided. Scalars hold one value per scalar slot.
void evaluate_cpu(const Program& program, std::span<const detail::TensorImpl* const> inputs,
                  std::span<const double> scalars,
                  std::span<const detail::TensorImpl* const> outputs,
                  const cpu::KernelTable& kernels);

// The single output of a program over row-major ranges of its iteration space, on the calling
// thread: evaluate_cpu's blockwise scheme (kBlock elements at a time, one SIMD pass per node)
// for a consumer that takes the values range by range instead of from memory, such as a
// reduction's prologue (src/cpu/reduce.cpp). Element i is the one evaluate_cpu would write at
// row-major index i of the output.
class RangeEvaluator {
 public:
  RangeEvaluator(const Program& program, std::span<const detail::TensorImpl* const> inputs,
                 std::span<const double> scalars, const Dims& shape,
                 const cpu::KernelTable& kernels);
  ~RangeEvaluator();

  // Working memory of one thread's run() calls.
  struct Scratch {
    std::vector<std::uint32_t> lanes;
    std::vector<cpu::Lanes> value;
  };
  Scratch scratch() const;
  // Writes elements [start, start + len) to dst in the output dtype's storage (bool: 1 byte),
  // evaluating blocks of kBlock from start. A SIMD kernel may take a per-vector path (an
  // argument outside a fast routine's range sends its whole vector to the scalar one), so the
  // values equal evaluate_cpu's bit for bit when start is a multiple of kBlock, as its blocks.
  void run(std::int64_t start, std::int64_t len, void* dst, Scratch& s) const;

 private:
  struct Impl;
  std::unique_ptr<const Impl> impl_;
};

}  // namespace kiln::ir
