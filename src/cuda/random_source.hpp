// The CUDA C source of the random kernels: src/core/philox.hpp's mapping, statement for
// statement, so that a seed gives the same tensor on the CPU and on CUDA. The text is
// src/cuda/kernels/random.cuh, embedded at build time (cmake/KilnEmbed.cmake).
#pragma once

#include <string>

namespace kiln::cuda {

// One source with two kernels, kiln_uniform and kiln_normal; each thread fills one block of
// four elements: (float* out, unsigned long long n, unsigned long long seed, a, b), where a, b
// are lo, hi as float (uniform) or mean, std as double (normal).
const std::string& random_source();

}  // namespace kiln::cuda
