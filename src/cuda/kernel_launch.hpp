// Launching kiln's generated kernels: a kernel launched again right after itself goes through a
// one-node CUDA graph whose arguments are set per launch; any other launch goes straight to
// cudaLaunchKernel.
//
// Measured on the H200 machine (2026-12-03, bench/probes/host_costs.cpp, a kernel with a fused
// chain8's seven arguments): cudaLaunchKernel costs the host 4.2-4.5 us per launch; setting the
// arguments of an instantiated one-node graph (cuGraphExecKernelNodeSetParams) and launching it
// costs 2.3-2.4 us, and its launch + sync is 1.7 us shorter (7.2 against 8.9 us). Element-wise
// kernels take a few microseconds on the device, so the host's share decides a fused chain's
// time, and a loop (or the seed method's call + sync, repeated) launches the same kernel again
// and again.
//
// Why only repeats: the device pays for switching between graphs. Eight kernels launched in turn
// through their own graphs, back to back, took 0.7-0.9 us more device time each than launched
// directly (the unfused chain8: 76.7-77.9 us against 70.0-71.2 us), while one kernel repeated
// through its graph took no more (the fused chain8: 7.6-7.7 against 7.9-8.4 us). One graph per
// device with the kernel swapped in per launch avoided that on the device (67.7 us) but cost the
// host about 5 us per swap. So a sequence of different kernels, which keeps the device busy
// anyway, launches directly, and a repeated kernel, whose host cost shows, uses its graph.
//
// A kernel gets its graph, per device, at its first repeat: that launch is captured on a private
// stream and instantiated (about 0.1 ms, once). Later repeats set the node's grid and arguments,
// then launch the graph on the device's stream; an update affects only launches queued after
// it. A repeat whose grid and argument bytes are those the node holds already (a loop over the
// same tensors, or a freed output's memory handed back for the next call's output) skips the
// update: a bare graph launch costs the host 1.9-2.0 us on the H200 machine against 2.3-2.4 us
// with the update (the same probe). Where the driver lacks the entry point, or CUDA refuses a
// capture or an update, that kernel is launched directly from then on, so errors surface from
// cudaLaunchKernel with its own message.
#pragma once

#include <cuda_runtime.h>

#include "cuda/context.hpp"

namespace kiln::cuda {

// Queues kernel k on ctx's stream, `grid` blocks of `block` threads, with the argument pointers
// `args` (cudaLaunchKernel's form). Thread-safe.
void launch(Context& ctx, cudaKernel_t k, unsigned grid, unsigned block, void** args);

// Whether launches go through graphs (the default) or straight to cudaLaunchKernel, for the
// benchmarks that compare the two. Thread-safe; affects launches made after it.
void set_graph_launches(bool on);

// Launches since the process started, for the tests and the benchmarks: through a graph (of
// which `unchanged` found the node holding their arguments already) and directly.
struct LaunchStats {
  long long graph = 0, unchanged = 0, direct = 0;
};
LaunchStats launch_stats();

}  // namespace kiln::cuda
