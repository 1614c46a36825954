// The gradient of an element-wise program, as an element-wise program (reverse mode over its
// DAG). It is what makes the backward pass of fused forward work fuse too: the autodiff
// decorator runs the gradient program through the same backend call as any other.
//
// The gradient program re-evaluates the forward nodes it needs from the forward inputs instead
// of reading saved intermediates, so backward of an element-wise chain reads the chain's inputs
// and the upstream gradients once and writes one gradient per input.
//
// Each op's derivative rule is in derivative.cpp's switch, which names every op of the list
// (kiln/detail/op_list.hpp) without a default, so an op added there without a rule fails the
// build. Conventions, as PyTorch's: abs'(0) = 0, relu'(0) = 0; minimum/maximum split the
// gradient evenly between equal operands; pow's exponent gradient is 0 where the base is 0 and
// the exponent >= 0; comparisons, integer and bool nodes carry no gradient.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ir/program.hpp"

namespace kiln::ir {

struct Gradient {
  // Inputs: the forward program's inputs (same slots), then one upstream gradient per seeded
  // output, in output order, of that output's dtype. Scalars: the forward program's, then the
  // constants below. Outputs: one per wanted input, in input order, of that input's dtype: the
  // gradient element by element (a broadcast input's gradient is summed over its broadcast dims
  // by the caller).
  Program program;
  std::vector<double> constants;  // the values of the scalar slots after the forward program's
  std::vector<int> inputs;        // the forward input each output is the gradient of
};

// Whether a gradient can flow through a value of this dtype (floating dtypes).
bool differentiable(DType t);

// The gradient of `forward` with upstream gradients for the outputs where `seeded` is true, for
// the inputs where `wanted` is true and the dtype is differentiable. Throws ValueError when the
// spans' sizes differ from the program's outputs and inputs.
Gradient gradient(const Program& forward, std::span<const bool> seeded,
                  std::span<const bool> wanted);

}  // namespace kiln::ir
