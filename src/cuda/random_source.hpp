// The CUDA C source of the random kernels: src/core/philox.hpp's mapping, statement for
// statement, so that a seed gives the same tensor on the CPU and on CUDA. The text is the IR's
// prelude (its Box-Muller, src/ir/box_muller.cuh, is the CPU's too) then
// src/cuda/kernels/random.cuh, embedded at build time (cmake/KilnEmbed.cmake).
#pragma once

#include <string>

namespace kiln::cuda {

// One source with the kernels kiln_uniform and kiln_normal (f32 output) and kiln_uniform_bf16,
// kiln_normal_bf16, kiln_uniform_f16, kiln_normal_f16; each thread fills one block of four
// elements: (T* out, unsigned long long n, unsigned long long seed, a, b), where a, b are lo, hi
// (uniform) or mean, std (normal), as float.
const std::string& random_source();

}  // namespace kiln::cuda
