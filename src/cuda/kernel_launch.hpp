// Launching kiln's generated kernels through one-node CUDA graphs whose arguments are set per
// launch.
//
// Measured on the H200 machine (2026-12-03, bench/probes/host_costs.cpp, a kernel with a fused
// chain8's seven arguments): cudaLaunchKernel costs the host 4.2-4.4 us per launch; setting the
// arguments of an instantiated one-node graph (cuGraphExecKernelNodeSetParams) and launching it
// costs 2.3-2.4 us, and its launch + sync is 1.7 us shorter (7.2 against 8.9 us). Element-wise
// kernels take a few microseconds on the device, so the host's share decides a fused chain's
// time.
//
// Each (kernel, device) gets its graph at its first launch: one launch captured on a private
// stream and instantiated (about 0.1 ms, once). Later launches set the node's grid and
// arguments, then launch the graph on the device's stream; an update affects only launches
// queued after it. Where the driver lacks the entry point, or CUDA refuses a capture or an
// update, that kernel is launched directly from then on, as before, so errors surface from
// cudaLaunchKernel with its own message.
#pragma once

#include <cuda_runtime.h>

#include "cuda/context.hpp"

namespace kiln::cuda {

// Queues kernel k on ctx's stream, `grid` blocks of `block` threads, with the argument pointers
// `args` (cudaLaunchKernel's form). Thread-safe.
void launch(Context& ctx, cudaKernel_t k, unsigned grid, unsigned block, void** args);

// Launches since the process started, through a graph and directly, for the tests and the
// benchmarks.
struct LaunchStats {
  long long graph = 0, direct = 0;
};
LaunchStats launch_stats();

}  // namespace kiln::cuda
