// One CUDA device as kiln uses it: its properties, its non-blocking stream and its memory pool.
//
// Contexts are created at first use and live until the process ends (their streams and pools
// are never destroyed: tensors freed during static destruction still free onto them).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "kiln/device.hpp"

namespace kiln::cuda {

struct Context {
  int index = 0;
  Device device = Device::cpu();  // Device::cuda(index), kept: tensors are stamped with it
  std::string name;               // "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::size_t total_memory = 0;
  cudaStream_t stream = nullptr;  // every op of this device is queued here, in order
  cudaMemPool_t pool = nullptr;   // the device's default pool, keeping freed memory for reuse

  std::string arch_name;  // "sm_90": the architecture NVRTC compiles for

  const std::string& arch() const { return arch_name; }
  // Makes this device current on the calling thread (cheap when it already is).
  void make_current() const;
};

// The number of CUDA devices, or 0 with `why` set (no driver, no device, ...).
int device_count(std::string* why);
// Why device `index` cannot be used, or empty when it can.
std::string absent_reason(int index);
// The context of a present device; DeviceError with the reason when absent.
Context& context(int index);

// The CUDA runtime, driver and NVRTC versions, e.g. "13.0"; cuBLASLt's, e.g. "13.1.0".
std::string runtime_version();
std::string driver_version();
std::string nvrtc_version();
std::string cublas_version();

}  // namespace kiln::cuda
