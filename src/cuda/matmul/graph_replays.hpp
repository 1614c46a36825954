// Replaying a repeated library call as a CUDA graph: for cuBLASLt, whose host cost per call is
// larger than a small product's device time.
//
// Measured on the H200 machine (2026-12-03, bench/probes/host_costs.cpp and a capture probe,
// 1024^3): queuing a cublasLtMatmul costs the host 10 us (strict fp32) to 15 us (TF32), more
// than the TF32 product itself takes on the device (13 us); launching the same call captured as
// a CUDA graph costs 1.4-2 us. One call and a sync, min: 66.8 -> 60.7 us strict, 26.5 -> 17.9 us
// TF32. Capturing and instantiating takes 0.1-0.2 ms, once.
//
// A call is captured when its addresses (operands and output) were seen before for the same
// plan, which is what a loop does: the stream-ordered pool hands the same memory back every
// iteration, so from the second iteration on the call is a replay. Addresses seen once are run
// directly. A plan keeps its last kSeen addresses and its kGraphs most recent graphs; a capture
// that fails turns replays off for the plan (the call then always runs directly). The graph
// bakes in everything the call was given (pointers, algorithm, workspace, host-side alpha and
// beta), so a caller keys it by every address the call reads or writes and keeps one
// GraphReplays per set of the rest (a plan).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <deque>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/context.hpp"

namespace kiln::cuda {

class GraphReplays {
 public:
  using Addresses = std::array<const void*, 5>;  // operands, output, epilogue's (or null)
  // Queues the call on the stream it is given.
  using Call = std::function<void(cudaStream_t)>;

  GraphReplays() = default;
  GraphReplays(const GraphReplays&) = delete;
  GraphReplays& operator=(const GraphReplays&) = delete;

  // Queues `call` on ctx's stream: as a replay of its graph when `at` has one, captured now when
  // `at` was seen before, else directly.
  void run(Context& ctx, const Addresses& at, const Call& call);

 private:
  static constexpr std::size_t kSeen = 16, kGraphs = 16;

  // Under mu_: captures `call` into a graph and instantiates it; nullptr (and replays off for
  // good) when CUDA refuses.
  cudaGraphExec_t capture(Context& ctx, const Call& call);

  std::mutex mu_;
  bool off_ = false;
  cudaStream_t capture_stream_ = nullptr;  // made at the first capture, never destroyed
  std::deque<Addresses> seen_;
  std::vector<std::pair<Addresses, cudaGraphExec_t>> graphs_;  // oldest first
};

// Counters over every GraphReplays of the process, for the tests and KILN_LOG.
struct GraphStats {
  long long captures = 0, replays = 0;
};
GraphStats graph_stats();

}  // namespace kiln::cuda
