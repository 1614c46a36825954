// The fixed kernels kiln needs most, compiled before their first use.
//
// A first process (an empty store) compiles every kernel it runs with NVRTC, and the first
// compile of a process also pays NVRTC's own start (0.2-0.6 s on a freshly started machine,
// docs/autotune.md). So when a device's backend is made, kiln's one background compile thread
// (compile_in_background) is given the kernels that do not depend on the program: the random
// kernels, the f32 reductions along rows and over all elements (sum, mean, max), and its own
// GEMM candidates for row-major and transposed-b operands at the large-problem tile. Each is
// read from the store instead when it is there, so a later process compiles nothing; the fused
// kernels a program generates are left to the store alone.
#pragma once

#include "cuda/context.hpp"

namespace kiln::cuda {

// Queues the compiles above for ctx's device, once per device. Never throws (a source that
// cannot be queued is compiled at its first use, as without this).
void precompile_in_background(Context& ctx);

}  // namespace kiln::cuda
