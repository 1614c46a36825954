// The fixed kernels kiln needs most, compiled before their first use.
//
// A first process (an empty store) compiles every kernel it runs with NVRTC, one after another
// on the caller's thread. So at the first compile of a process (the sign that the store lacks
// this build's kernels), kiln's one background compile thread (compile_in_background) is given
// the kernels that do not depend on the program: the random kernels, the f32 reductions along
// rows and over all elements (sum, mean, max), and its own GEMM candidates for row-major and
// transposed-b operands at the large-problem tile. They compile beside the program's own work
// instead of in its way; each is read from the store instead when it is there. A process that
// compiles nothing (its kernels are all stored, or it only opens the device: `kiln info`) never
// queues them, so it neither writes the store nor waits at exit for a compile. The fused
// kernels a program generates are left to the store alone.
#pragma once

#include "cuda/context.hpp"

namespace kiln::cuda {

// Arranges, once per device, for the compiles above to be queued at the process's first compile
// (before_first_compile). Never throws (a source that cannot be queued is compiled at its first
// use, as without this).
void precompile_in_background(Context& ctx);

}  // namespace kiln::cuda
