#include "cuda/matmul/graph_replays.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "core/log.hpp"
#include "cuda/check.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda {
namespace {

std::atomic<long long> captures{0}, replays{0};

void refuse(const char* what, cudaError_t e) {
  cudaGetLastError();  // (clears a non-sticky error, so the direct call starts clean)
  if (detail::log_enabled("graphs")) {
    detail::log_line("graphs", fmt::format("{} failed ({}): this plan's calls run directly", what,
                                           cudaGetErrorString(e)));
  }
}

}  // namespace

cudaGraphExec_t GraphReplays::capture(Context& ctx, const Call& call) {
  ctx.make_current();
  off_ = true;  // until the capture has succeeded
  cudaError_t e = cudaSuccess;
  if (!capture_stream_ &&
      (e = cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking)) != cudaSuccess) {
    capture_stream_ = nullptr;
    refuse("creating a capture stream", e);
    return nullptr;
  }
  // Thread-local mode: other threads' CUDA calls go on as usual while this one captures.
  if ((e = cudaStreamBeginCapture(capture_stream_, cudaStreamCaptureModeThreadLocal)) !=
      cudaSuccess) {
    refuse("cudaStreamBeginCapture", e);
    return nullptr;
  }
  cudaGraph_t graph = nullptr;
  try {
    call(capture_stream_);
  } catch (const Error&) {
    cudaStreamEndCapture(capture_stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    refuse("the call under capture", cudaGetLastError());
    return nullptr;
  }
  if ((e = cudaStreamEndCapture(capture_stream_, &graph)) != cudaSuccess || graph == nullptr) {
    refuse("cudaStreamEndCapture", e);
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable keeps what it needs
  if (e != cudaSuccess) {
    refuse("cudaGraphInstantiate", e);
    return nullptr;
  }
  off_ = false;
  captures.fetch_add(1, std::memory_order_relaxed);
  return exec;
}

void GraphReplays::run(Context& ctx, const Addresses& at, const Call& call) {
  {
    std::lock_guard lock(mu_);
    if (!off_) {
      cudaGraphExec_t exec = nullptr;
      for (const auto& [addresses, graph] : graphs_)
        if (addresses == at) exec = graph;
      if (!exec && std::find(seen_.begin(), seen_.end(), at) != seen_.end()) {
        if ((exec = capture(ctx, call)) != nullptr) {
          graphs_.emplace_back(at, exec);
          if (graphs_.size() > kGraphs) {
            // (A graph still running is freed when it completes.)
            cudaGraphExecDestroy(graphs_.front().second);
            graphs_.erase(graphs_.begin());
          }
        }
      } else if (!exec) {
        seen_.push_back(at);
        if (seen_.size() > kSeen) seen_.pop_front();
      }
      if (exec) {  // launched under the lock: an eviction cannot destroy it first
        KILN_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream));
        replays.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
  }
  call(ctx.stream);
}

GraphStats graph_stats() { return {captures.load(), replays.load()}; }

}  // namespace kiln::cuda
