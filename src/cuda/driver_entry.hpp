// A driver call looked up through the runtime (cudaGetDriverEntryPointByVersion), so that kiln
// needs no link against libcuda, whose absence it reports as a reason rather than as a program
// that cannot start. Null where the driver lacks it (a call newer than the driver).
#pragma once

#include <cuda_runtime.h>

namespace kiln::cuda {

template <class F>
F driver_entry_point(const char* name, unsigned version = 12000) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<F>(fn);
}

}  // namespace kiln::cuda
