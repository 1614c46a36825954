// KILN_LOG=profile: where the device time goes. Every kernel kiln launches on a GPU and every
// cuBLASLt matmul is timed on the device between two CUDA events recorded on its stream around
// it; the times of finished launches are gathered per kernel name at each sync, and at exit kiln
// prints calls, total device time, mean, median, minimum and share per name, the longest first
// (a median below the mean: one-time costs in a few launches). The events cost
// the host a few microseconds per launch, so figures taken with it on are not kiln's own: it says
// which kernels to look at, beside the benchmarks that say how fast.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace kiln::cuda {

// Whether KILN_LOG names "profile" (read once).
bool profiling();

// Times what is queued on `stream` between its construction and its destruction: a kernel (named
// by the driver) or anything else under `name`. Does nothing where profiling() is false, or
// default-constructed.
class KernelTimer {
 public:
  KernelTimer() = default;
  KernelTimer(cudaStream_t stream, cudaKernel_t kernel);
  KernelTimer(cudaStream_t stream, std::string name);
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

 private:
  void start(cudaStream_t stream);
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaKernel_t kernel_ = nullptr;
  std::string name_;
};

// The name KILN_LOG=profile gives `kernel` instead of the driver's (every generated element-wise
// kernel is "kiln_elementwise": its caller names it by its program). Only while profiling().
void name_kernel(cudaKernel_t kernel, std::string name);

// Adds the timers whose events have completed to the per-name totals (CudaBackend::sync calls
// it, so that few events are alive at once and the totals exist before the process exits).
void collect_kernel_times();

// The table KILN_LOG=profile prints at exit (empty while nothing was timed).
std::string kernel_time_report();

}  // namespace kiln::cuda
