// The one checking macro for every CUDA runtime, NVRTC and cuBLASLt call.
//
// KILN_CUDA_CHECK(call) evaluates the call once and, unless it succeeded, throws DeviceError
// with the call's text, where it was made and the library's own message, e.g.
//   cudaMallocAsync(&p, bytes, stream) failed: out of memory (cudaErrorMemoryAllocation)
//   at src/cuda/device_memory.cpp:42
// The overloads of check() pick the library from the status type the call returns.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nvrtc.h>

namespace kiln::cuda {

[[noreturn]] void throw_failed(const char* call, const char* file, int line, const char* message,
                               const char* code_name);

inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear a non-sticky error, so the next call starts clean
    throw_failed(call, file, line, cudaGetErrorString(e), cudaGetErrorName(e));
  }
}

inline void check(nvrtcResult e, const char* call, const char* file, int line) {
  if (e != NVRTC_SUCCESS) throw_failed(call, file, line, nvrtcGetErrorString(e), "nvrtcResult");
}

inline void check(cublasStatus_t e, const char* call, const char* file, int line) {
  if (e != CUBLAS_STATUS_SUCCESS) {
    throw_failed(call, file, line, cublasLtGetStatusString(e), cublasLtGetStatusName(e));
  }
}

}  // namespace kiln::cuda

#define KILN_CUDA_CHECK(call) ::kiln::cuda::check((call), #call, __FILE__, __LINE__)
