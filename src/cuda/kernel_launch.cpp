#include "cuda/kernel_launch.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <fmt/format.h>

#include <atomic>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/log.hpp"
#include "cuda/check.hpp"
#include "cuda/driver_entry.hpp"
#include "cuda/kernel_profile.hpp"

namespace kiln::cuda {
namespace {

std::atomic<long long> graph_launches{0}, unchanged_launches{0}, direct_launches{0};
std::atomic<bool> graphs_on{true};

// The driver calls the runtime does not offer in this form (driver_entry.hpp).
struct Driver {
  PFN_cuGraphExecKernelNodeSetParams_v12000 set_params = nullptr;
  PFN_cuKernelGetFunction_v12000 get_function = nullptr;
  PFN_cuFuncGetParamInfo_v12040 param_info = nullptr;  // (null before CUDA 12.4)
};

const Driver& driver() {
  static const Driver d{
      driver_entry_point<PFN_cuGraphExecKernelNodeSetParams_v12000>(
          "cuGraphExecKernelNodeSetParams"),
      driver_entry_point<PFN_cuKernelGetFunction_v12000>("cuKernelGetFunction"),
      driver_entry_point<PFN_cuFuncGetParamInfo_v12040>("cuFuncGetParamInfo", 12040)};
  return d;
}

// One kernel's graph on one device. Never destroyed, like the contexts: kernels live as long
// as the process.
struct KernelGraph {
  bool off = false;             // launch directly
  cudaGraph_t graph = nullptr;  // kept: `node` belongs to it
  cudaGraphNode_t node = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUfunction function = nullptr;  // the kernel in this device's context
  // The kernel's parameter sizes (empty where CUDA does not report them: then every launch sets
  // the node), and the grid, block and argument bytes the node holds now.
  std::vector<std::size_t> param_sizes;
  unsigned grid = 0, block = 0;
  std::vector<unsigned char> arg_bytes;
};

struct Graphs {
  std::mutex mu;
  std::map<std::pair<cudaKernel_t, int>, KernelGraph> by_kernel;  // (kernel, device index)
  std::vector<cudaStream_t> capture_streams;                      // by device index
  std::vector<cudaKernel_t> last_launched;                        // by device index
};
Graphs& graphs() {
  static auto* g = new Graphs;  // (never destroyed: a launch may come from a static destructor)
  return *g;
}

void refuse(const char* what, const char* why) {
  cudaGetLastError();  // (clears a non-sticky error, so the direct launch starts clean)
  if (detail::log_enabled("graphs")) {
    detail::log_line("graphs",
                     fmt::format("{} failed ({}): this kernel is launched directly", what, why));
  }
}
void refuse(const char* what, cudaError_t e) { refuse(what, cudaGetErrorString(e)); }

// A function's parameter sizes in order; empty if the driver cannot say (before CUDA 12.4).
std::vector<std::size_t> param_sizes(CUfunction f) {
  const auto info = driver().param_info;
  std::vector<std::size_t> sizes;
  std::size_t offset = 0, size = 0;
  while (info && info(f, sizes.size(), &offset, &size) == CUDA_SUCCESS) sizes.push_back(size);
  return sizes;  // (the driver's "index out of range" ends the list; it sets no runtime error)
}

// Under the graphs' mutex: captures one launch of k into g. On any refusal g stays off.
void make_graph(Graphs& all, Context& ctx, KernelGraph& g, cudaKernel_t k, unsigned grid,
                unsigned block, void** args) {
  g.off = true;  // until the graph exists
  const Driver& d = driver();
  if (!d.set_params || !d.get_function) return refuse("looking up the driver's graph calls", "");
  if (d.get_function(&g.function, reinterpret_cast<CUkernel>(k)) != CUDA_SUCCESS)
    return refuse("cuKernelGetFunction", "");
  if (all.capture_streams.size() <= static_cast<std::size_t>(ctx.index))
    all.capture_streams.resize(ctx.index + 1, nullptr);
  cudaStream_t& stream = all.capture_streams[ctx.index];
  cudaError_t e = cudaSuccess;
  if (!stream && (e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) {
    stream = nullptr;
    return refuse("creating a capture stream", e);
  }
  // Thread-local mode: other threads' CUDA calls go on as usual while this one captures.
  if ((e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal)) != cudaSuccess)
    return refuse("cudaStreamBeginCapture", e);
  const cudaError_t launched =
      cudaLaunchKernel(reinterpret_cast<const void*>(k), dim3(grid), dim3(block), args, 0, stream);
  e = cudaStreamEndCapture(stream, &g.graph);
  if (launched != cudaSuccess || e != cudaSuccess || !g.graph) {
    if (g.graph) cudaGraphDestroy(g.graph);
    g.graph = nullptr;
    return refuse("capturing the launch", launched != cudaSuccess ? launched : e);
  }
  std::size_t nodes = 1;
  if ((e = cudaGraphGetNodes(g.graph, &g.node, &nodes)) != cudaSuccess || nodes != 1)
    return refuse("cudaGraphGetNodes", e);
  if ((e = cudaGraphInstantiate(&g.exec, g.graph, 0)) != cudaSuccess)
    return refuse("cudaGraphInstantiate", e);
  g.param_sizes = param_sizes(g.function);
  g.off = false;
}

// Under the graphs' mutex: whether g's node already holds this launch's grid and arguments
// (a loop over the same tensors, or a freed output's memory handed back for the next one), and
// if not, records them as what it will hold.
bool node_holds(KernelGraph& g, unsigned grid, unsigned block, void** args) {
  if (g.param_sizes.empty()) return false;
  thread_local std::vector<unsigned char> bytes;
  bytes.clear();
  for (std::size_t i = 0; i < g.param_sizes.size(); ++i) {
    const auto* p = static_cast<const unsigned char*>(args[i]);
    bytes.insert(bytes.end(), p, p + g.param_sizes[i]);
  }
  if (g.grid == grid && g.block == block && g.arg_bytes == bytes) return true;
  g.grid = grid;
  g.block = block;
  g.arg_bytes.swap(bytes);
  return false;
}

// Under the graphs' mutex: queues the launch as g's graph with these arguments, setting them on
// the node unless it holds them already; false (and g off) when the driver refuses the update.
bool launch_graph(Context& ctx, KernelGraph& g, unsigned grid, unsigned block, void** args) {
  if (node_holds(g, grid, block, args)) {
    KILN_CUDA_CHECK(cudaGraphLaunch(g.exec, ctx.stream));
    unchanged_launches.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = g.function;
  p.gridDimX = grid;
  p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = block;
  p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args;
  if (driver().set_params(reinterpret_cast<CUgraphExec>(g.exec),
                          reinterpret_cast<CUgraphNode>(g.node), &p) != CUDA_SUCCESS) {
    g.off = true;
    g.arg_bytes.clear();
    refuse("cuGraphExecKernelNodeSetParams", "");
    return false;
  }
  KILN_CUDA_CHECK(cudaGraphLaunch(g.exec, ctx.stream));
  return true;
}

}  // namespace

void launch(Context& ctx, cudaKernel_t k, unsigned grid, unsigned block, void** args) {
  ctx.make_current();
  const KernelTimer timer(ctx.stream, k);  // (KILN_LOG=profile only)
  if (graphs_on.load(std::memory_order_relaxed)) {
    Graphs& all = graphs();
    std::lock_guard lock(all.mu);
    if (all.last_launched.size() <= static_cast<std::size_t>(ctx.index))
      all.last_launched.resize(ctx.index + 1, nullptr);
    const bool repeat = std::exchange(all.last_launched[ctx.index], k) == k;
    KernelGraph& g = all.by_kernel[{k, ctx.index}];
    if (repeat && !g.off && !g.exec) make_graph(all, ctx, g, k, grid, block, args);
    if (repeat && !g.off && launch_graph(ctx, g, grid, block, args)) {
      graph_launches.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  KILN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(k), dim3(grid), dim3(block), args,
                                   0, ctx.stream));
  direct_launches.fetch_add(1, std::memory_order_relaxed);
}

void set_graph_launches(bool on) { graphs_on.store(on, std::memory_order_relaxed); }

LaunchStats launch_stats() {
  return {graph_launches.load(), unchanged_launches.load(), direct_launches.load()};
}

}  // namespace kiln::cuda
