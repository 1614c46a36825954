// The host's share of the CUDA figures kiln is measured against, on a warm process, with nothing
// of kiln's in them: per call, the host time to queue a cuBLASLt matmul (the heuristic's first
// three algorithms for 1024^3, strict fp32 then TF32) and its seed-method time (one call and a
// sync, min of 200); a cudaMallocAsync + cudaFreeAsync pair of 16 MiB from a pool that keeps
// freed memory; an empty kernel's cudaLaunchKernel, and its launch + sync; then a kernel with a
// fused chain8's arguments launched four ways: cudaLaunchKernel, cuLaunchKernel, a captured
// graph replayed, and that graph with its arguments set before each launch. Queued costs: 200 or
// 2000 calls without a sync, host time per call, min of five batches.
//
// docs/benchmarks.md quotes what it printed on the H200 machine: the floor under kiln's
// seed-method matmul and chain8 figures.
#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void check(int status, const char* call) {
  if (status != 0) {
    std::printf("%s failed: %d\n", call, status);
    std::exit(1);
  }
}
#define CHECK(call) check(static_cast<int>(call), #call)

double since_us(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Host time per call of `call` queued `n` times, min over five batches (synced between them).
template <class F>
double queued_us(cudaStream_t s, int n, F&& call) {
  double best = 1e30;
  for (int batch = 0; batch < 5; ++batch) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) call();
    best = std::min(best, since_us(t0) / n);
    CHECK(cudaStreamSynchronize(s));
  }
  return best;
}

// One call and a sync, host clock around both, min of `n`.
template <class F>
double seed_method_us(cudaStream_t s, int n, F&& call) {
  double best = 1e30;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    call();
    CHECK(cudaStreamSynchronize(s));
    best = std::min(best, since_us(t0));
  }
  return best;
}

}  // namespace

int main() {
  constexpr int n = 1024;
  std::size_t workspace_bytes = std::size_t{32} << 20;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  std::uint64_t keep = UINT64_MAX;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  float *a, *b, *c;
  void* workspace;
  for (float** p : {&a, &b, &c}) CHECK(cudaMallocAsync(reinterpret_cast<void**>(p), n * n * 4, s));
  CHECK(cudaMallocAsync(&workspace, workspace_bytes, s));
  CHECK(cudaMemsetAsync(a, 0, n * n * 4, s));
  CHECK(cudaMemsetAsync(b, 0, n * n * 4, s));

  cublasLtHandle_t h;
  CHECK(cublasLtCreate(&h));
  for (const bool tf32 : {false, true}) {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t layout;
    cublasLtMatmulPreference_t pref;
    CHECK(cublasLtMatmulDescCreate(&desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                   CUDA_R_32F));
    CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, n, n, n));
    CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &workspace_bytes, sizeof workspace_bytes));
    cublasLtMatmulHeuristicResult_t results[3];
    int found = 0;
    CHECK(cublasLtMatmulAlgoGetHeuristic(h, desc, layout, layout, layout, layout, pref, 3, results,
                                         &found));
    const float one = 1, zero = 0;
    for (int k = 0; k < found; ++k) {
      auto matmul = [&] {
        CHECK(cublasLtMatmul(h, desc, &one, a, layout, b, layout, &zero, c, layout, c, layout,
                             &results[k].algo, workspace, workspace_bytes, s));
      };
      for (int i = 0; i < 20; ++i) matmul();  // warm-up
      CHECK(cudaStreamSynchronize(s));
      std::printf(
          "%s, heuristic's algorithm %d: cublasLtMatmul queued %.2f us per call; "
          "call + sync min %.2f us\n",
          tf32 ? "tf32" : "fp32", k, queued_us(s, 200, matmul), seed_method_us(s, 200, matmul));
    }
  }

  void* m = nullptr;
  std::printf("cudaMallocAsync + cudaFreeAsync, 16 MiB from the pool: %.2f us per pair\n",
              queued_us(s, 2000, [&] {
                CHECK(cudaMallocAsync(&m, std::size_t{16} << 20, s));
                CHECK(cudaFreeAsync(m, s));
              }));

  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const std::string arch =
      "--gpu-architecture=sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
  const char* options[] = {arch.c_str()};
  nvrtcProgram prog;
  // empty(): nothing; args(): the parameter list of kiln's fused chain8 (two pointers, four
  // floats, a count), writing one element so that a replay with other arguments is observable.
  const char* source =
      "extern \"C\" __global__ void empty() {}\n"
      "extern \"C\" __global__ void args(const float* x, float* z, float s0, float s1, float s2,\n"
      "                                  float s3, unsigned n) {\n"
      "  if (blockIdx.x == 0 && threadIdx.x == 0 && n) z[0] = x[0] * s0 + s1 + s2 + s3;\n"
      "}\n";
  CHECK(nvrtcCreateProgram(&prog, source, "probe.cu", 0, nullptr, nullptr));
  CHECK(nvrtcCompileProgram(prog, 1, options));
  std::size_t size = 0;
  CHECK(nvrtcGetCUBINSize(prog, &size));
  std::vector<char> cubin(size);
  CHECK(nvrtcGetCUBIN(prog, cubin.data()));
  cudaLibrary_t library;
  cudaKernel_t empty;
  CHECK(cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CHECK(cudaLibraryGetKernel(&empty, library, "empty"));
  auto launch = [&] {
    CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(empty), dim3(1), dim3(32), nullptr, 0, s));
  };
  std::printf(
      "cudaLaunchKernel of an empty kernel: %.2f us per launch; launch + sync min %.2f us\n",
      queued_us(s, 2000, launch), seed_method_us(s, 500, launch));

  // The launch paths open to a fused group's kernel, with its arguments, 264 blocks of 256.
  cudaKernel_t args_kernel;
  CHECK(cudaLibraryGetKernel(&args_kernel, library, "args"));
  float *x, *z;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&x), 1 << 20));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&z), 1 << 20));
  float s0 = 0.5f, s1 = 0.25f, s2 = 0.5f, s3 = 0.25f;
  unsigned count = 1u << 20;
  void* params[] = {&x, &z, &s0, &s1, &s2, &s3, &count};
  const dim3 grid(264), block(256);
  auto runtime_launch = [&] {
    CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(args_kernel), grid, block, params, 0, s));
  };
  std::printf("cudaLaunchKernel, 7 arguments: %.2f us per launch; launch + sync min %.2f us\n",
              queued_us(s, 2000, runtime_launch), seed_method_us(s, 500, runtime_launch));

  CUfunction function;  // the same kernel through the driver API
  CHECK(cuKernelGetFunction(&function, reinterpret_cast<CUkernel>(args_kernel)));
  auto driver_launch = [&] {
    CHECK(cuLaunchKernel(function, grid.x, 1, 1, block.x, 1, 1, 0, s, params, nullptr));
  };
  std::printf("cuLaunchKernel, 7 arguments: %.2f us per launch; launch + sync min %.2f us\n",
              queued_us(s, 2000, driver_launch), seed_method_us(s, 500, driver_launch));

  // A graph of that one launch, captured once and replayed as it is.
  cudaStream_t capture;
  CHECK(cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal));
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(args_kernel), grid, block, params, 0,
                         capture));
  CHECK(cudaStreamEndCapture(capture, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  auto replay = [&] { CHECK(cudaGraphLaunch(exec, s)); };
  std::printf("cudaGraphLaunch of it: %.2f us per launch; launch + sync min %.2f us\n",
              queued_us(s, 2000, replay), seed_method_us(s, 500, replay));

  // The same graph with its kernel node's arguments set before each launch (so one graph serves
  // every address), through the runtime and through the driver.
  std::size_t nodes = 1;
  cudaGraphNode_t node;
  CHECK(cudaGraphGetNodes(graph, &node, &nodes));
  cudaKernelNodeParams node_params{};
  node_params.func = reinterpret_cast<void*>(args_kernel);
  node_params.gridDim = grid;
  node_params.blockDim = block;
  node_params.kernelParams = params;
  auto update_replay = [&] {
    CHECK(cudaGraphExecKernelNodeSetParams(exec, node, &node_params));
    CHECK(cudaGraphLaunch(exec, s));
  };
  if (const cudaError_t e = cudaGraphExecKernelNodeSetParams(exec, node, &node_params))
    std::printf("cudaGraphExecKernelNodeSetParams refuses a library kernel: %s\n",
                cudaGetErrorString(e));
  else
    std::printf(
        "cudaGraphExecKernelNodeSetParams + cudaGraphLaunch: %.2f us per launch; launch + sync min "
        "%.2f us\n",
        queued_us(s, 2000, update_replay), seed_method_us(s, 500, update_replay));
  CUDA_KERNEL_NODE_PARAMS driver_params{};
  driver_params.func = function;
  driver_params.gridDimX = grid.x;
  driver_params.gridDimY = driver_params.gridDimZ = 1;
  driver_params.blockDimX = block.x;
  driver_params.blockDimY = driver_params.blockDimZ = 1;
  driver_params.kernelParams = params;
  auto driver_update = [&] {
    return cuGraphExecKernelNodeSetParams(reinterpret_cast<CUgraphExec>(exec),
                                          reinterpret_cast<CUgraphNode>(node), &driver_params);
  };
  auto driver_update_replay = [&] {
    CHECK(driver_update());
    CHECK(cudaGraphLaunch(exec, s));
  };
  if (const CUresult e = driver_update())
    std::printf("cuGraphExecKernelNodeSetParams failed: %d\n", static_cast<int>(e));
  else
    std::printf(
        "cuGraphExecKernelNodeSetParams + cudaGraphLaunch: %.2f us per launch; launch + sync min "
        "%.2f us\n",
        queued_us(s, 2000, driver_update_replay), seed_method_us(s, 500, driver_update_replay));
  return 0;
}
