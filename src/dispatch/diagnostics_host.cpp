// The build's, the CPU backend's and the CUDA libraries' facts for the `kiln` command
// (diagnostics.hpp).
#include <string>
#include <vector>

#include "cpu/blas_info.hpp"
#include "cpu/parallel.hpp"
#include "dispatch/diagnostics.hpp"
#if KILN_WITH_SIMD
#include "core/simd_targets.hpp"
#endif
#if KILN_WITH_CUDA
#include "cuda/context.hpp"
#include "cuda/cudnn_library.hpp"
#include "cuda/nccl_library.hpp"
#endif

namespace kiln::diagnostics {

// KILN_QUIET_FEATURES is given to this file alone (CMakeLists.txt): no other part of the library
// depends on it.
bool quiet_build() { return KILN_QUIET_FEATURES != 0; }

CpuReport cpu_report() {
  CpuReport r;
#if KILN_WITH_SIMD
  r.simd_targets = detail::simd_targets();
#endif
  r.threads = cpu::thread_count();
  r.blas = cpu::blas_library();
  r.blas_core = cpu::blas_core();
  r.blas_core_origin = cpu::blas_core_origin();
  r.blas_threads = cpu::blas_threads();
  return r;
}

CudaReport cuda_report() {
  CudaReport r;
#if KILN_WITH_CUDA
  r.built = true;
  r.runtime = cuda::runtime_version();
  r.driver = cuda::driver_version();
  r.nvrtc = cuda::nvrtc_version();
  r.cublas = cuda::cublas_version();
  r.nccl = cuda::nccl_status();
  r.cudnn = cuda::cudnn_status();
#endif
  return r;
}

}  // namespace kiln::diagnostics
