// How an element-wise node recomputes an input in backward instead of keeping it.
//
// Under fusion an intermediate that something keeps is written to memory; one that nothing keeps
// stays in registers. So a recorded element-wise op does not keep an input that an element-wise
// op of the same shape made: it keeps that op's Recipe, the input's value as a program over
// tensors that are kept anyway (leaves, results of matmuls, reductions, row ops), and its
// backward computes the input inside its own gradient program. A chain of element-wise ops then
// writes nothing in forward but its result, and its backward is element-wise calls that fuse as
// forward work does. A recipe longer than kMaxRecipeNodes is not made (the intermediate is kept):
// each node of a chain recomputes the chain before it, so the bound keeps that work linear.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "core/tensor_impl.hpp"
#include "ir/program.hpp"

namespace kiln::autodiff {

using detail::Handle;

inline constexpr std::size_t kMaxRecipeNodes = 48;

// A value as a program of one output over kept tensors (each of the call's shape) and scalars.
struct Recipe {
  ir::Program program;
  std::vector<Handle> inputs;
  std::vector<double> scalars;
};

// `p` with input `slot` replaced by `r`'s output: p's other inputs keep their order and r's
// follow them; p's scalars, then r's.
ir::Program substitute(const ir::Program& p, std::size_t slot, const ir::Program& r);

// Which inputs of `p` its output `o` (every output, without o) depends on.
std::vector<bool> inputs_read(const ir::Program& p, std::optional<std::size_t> o = std::nullopt);

// A recipe for an input that a gradient program does not read: a scalar 0 of its dtype, so the
// program needs no tensor for it (one shared recipe per dtype).
const std::shared_ptr<const Recipe>& placeholder(DType dtype);

// Output `o` of `p` alone, without the nodes, inputs and scalars it does not need: `inputs` and
// `scalars` (p's) are cut to match.
Recipe extract(const ir::Program& p, std::size_t o, const std::vector<Handle>& inputs,
               const std::vector<double>& scalars);

}  // namespace kiln::autodiff
