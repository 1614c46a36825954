// Runs an element-wise Program on the CPU, blockwise.
//
// The output index space is cut into blocks of kBlock elements (a few pages, so every live
// value of a block stays in L1/L2). Each block evaluates the program node by node with one
// SIMD pass per node (numexpr's scheme): a fused chain reads each input once and writes each
// output once, whatever its length. Blocks run in parallel on oneTBB.
#pragma once

#include <span>

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

}  // namespace kiln::ir
