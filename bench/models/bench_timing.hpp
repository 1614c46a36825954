// Timing shared by the op-table programs in bench/models/: the device time per call of an op,
// and the time the device takes to copy the same bytes, measured in the same run.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <kiln/kiln.hpp>
#include <vector>

#if KILN_BENCH_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace kiln_bench {

// The minimum over `runs` samples of the seconds per call of `call`, queued `batch` times
// between two syncs (with launches queued ahead, the device time per call).
inline double seconds_per_call(int runs, int batch, const std::function<void()>& call,
                               const std::function<void()>& sync) {
  call();
  sync();
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < batch; ++i) call();
    sync();
    const auto dt = std::chrono::steady_clock::now() - t0;
    best = std::min(best, std::chrono::duration<double>(dt).count() / batch);
  }
  return best;
}

// Seconds to copy `bytes` / 2 bytes from one buffer to another (so `bytes` move), as `device`
// copies memory: cudaMemcpyAsync device to device, or memcpy on the CPU.
inline double copy_seconds(const kiln::Device& device, int runs, int batch, std::size_t bytes) {
  const std::size_t half = bytes / 2;
#if KILN_BENCH_WITH_CUDA
  if (device.kind() == kiln::Device::Kind::cuda) {
    void *src = nullptr, *dst = nullptr;
    if (cudaSetDevice(device.index()) != cudaSuccess || cudaMalloc(&src, half) != cudaSuccess ||
        cudaMalloc(&dst, half) != cudaSuccess) {
      std::fprintf(stderr, "copy_seconds: cannot allocate the copy's buffers\n");
      std::exit(1);
    }
    const double s = seconds_per_call(
        runs, batch, [&] { cudaMemcpyAsync(dst, src, half, cudaMemcpyDeviceToDevice, nullptr); },
        [] { cudaDeviceSynchronize(); });
    cudaFree(src);
    cudaFree(dst);
    return s;
  }
#endif
  (void)device;
  std::vector<char> src(half, 1), dst(half);
  return seconds_per_call(
      runs, batch, [&] { std::memcpy(dst.data(), src.data(), half); }, [] {});
}

}  // namespace kiln_bench
