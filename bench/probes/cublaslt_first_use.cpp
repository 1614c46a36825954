// Where a process's first cuBLASLt matmul spends its time, step by step: the context, the
// handle, the descriptors, the heuristic query (or, with `load`, an algorithm read from the file
// a `save` run wrote, then cublasLtMatmulAlgoCheck), then three matmuls with a sync after each,
// for strict fp32 and then TF32, 1024^3. Run it as fresh processes:
//
//   kiln_probe_cublaslt_first_use save && kiln_probe_cublaslt_first_use load
//
// docs/autotune.md ("What is stored") quotes what it printed on the H200. It links cuBLASLt and
// the CUDA runtime only, so that nothing of kiln's is in the figures.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using Clock = std::chrono::steady_clock;
Clock::time_point last = Clock::now();

void lap(const char* what) {
  const auto now = Clock::now();
  std::printf("%-40s %9.3f ms\n", what,
              std::chrono::duration<double, std::milli>(now - last).count());
  last = now;
}

void check(int status, const char* call) {
  if (status != 0) {
    std::printf("%s failed: %d\n", call, status);
    std::exit(1);
  }
}
#define CHECK(call) check(static_cast<int>(call), #call)

}  // namespace

int main(int argc, char** argv) {
  const bool save = argc > 1 && std::strcmp(argv[1], "save") == 0;
  const bool load = argc > 1 && std::strcmp(argv[1], "load") == 0;
  constexpr int n = 1024;
  std::size_t workspace_bytes = std::size_t{32} << 20;
  CHECK(cudaFree(nullptr));
  lap("context (cudaFree(0))");
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *a, *b, *c;
  void* workspace;
  for (float** p : {&a, &b, &c}) CHECK(cudaMallocAsync(reinterpret_cast<void**>(p), n * n * 4, s));
  CHECK(cudaMallocAsync(&workspace, workspace_bytes, s));
  CHECK(cudaMemsetAsync(a, 0, n * n * 4, s));
  CHECK(cudaMemsetAsync(b, 0, n * n * 4, s));
  CHECK(cudaStreamSynchronize(s));
  lap("memory");
  cublasLtHandle_t h;
  CHECK(cublasLtCreate(&h));
  lap("cublasLtCreate");
  for (const bool tf32 : {false, true}) {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t layout;
    CHECK(cublasLtMatmulDescCreate(&desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                   CUDA_R_32F));
    CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, n, n, n));
    lap(tf32 ? "tf32: descriptors" : "fp32: descriptors");
    cublasLtMatmulAlgo_t algo;
    char file[64];
    std::snprintf(file, sizeof file, "/tmp/kiln_probe_algo_%d.bin", tf32 ? 1 : 0);
    if (load) {
      FILE* f = std::fopen(file, "rb");
      if (!f || std::fread(&algo, sizeof algo, 1, f) != 1) {
        std::printf("no %s: run with `save` first\n", file);
        return 1;
      }
      std::fclose(f);
      cublasLtMatmulHeuristicResult_t r{};
      CHECK(cublasLtMatmulAlgoCheck(h, desc, layout, layout, layout, layout, &algo, &r));
      lap("  algorithm from the file, checked");
    } else {
      cublasLtMatmulPreference_t pref;
      CHECK(cublasLtMatmulPreferenceCreate(&pref));
      CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &workspace_bytes, sizeof workspace_bytes));
      cublasLtMatmulHeuristicResult_t r{};
      int found = 0;
      CHECK(cublasLtMatmulAlgoGetHeuristic(h, desc, layout, layout, layout, layout, pref, 1, &r,
                                           &found));
      algo = r.algo;
      lap("  heuristic query");
      if (save) {
        FILE* f = std::fopen(file, "wb");
        if (f) {
          std::fwrite(&algo, sizeof algo, 1, f);
          std::fclose(f);
        }
      }
    }
    const float one = 1, zero = 0;
    for (int i = 0; i < 3; ++i) {
      CHECK(cublasLtMatmul(h, desc, &one, a, layout, b, layout, &zero, c, layout, c, layout, &algo,
                           workspace, workspace_bytes, s));
      lap("  matmul queued");
      CHECK(cudaStreamSynchronize(s));
      lap("  synced");
    }
  }
  return 0;
}
