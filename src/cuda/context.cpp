#include "cuda/context.hpp"

#include <cublasLt.h>
#include <fmt/format.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "cuda/check.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda {
namespace {

std::string version_string(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

struct Discovery {
  int count = 0;
  std::string why;
  Discovery() {
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess && count > 0) return;
    count = 0;
    cudaGetLastError();
    if (e == cudaErrorInsufficientDriver) {
      int driver = 0;
      cudaDriverGetVersion(&driver);
      why = driver == 0 ? "no CUDA driver"
                        : "the CUDA driver (" + version_string(driver) +
                              ") is older than the runtime (" + runtime_version() + ")";
    } else if (e == cudaErrorNoDevice || e == cudaSuccess) {
      why = "no CUDA device";
    } else {
      why = fmt::format("cudaGetDeviceCount failed: {} ({})", cudaGetErrorString(e),
                        cudaGetErrorName(e));
    }
  }
};

const Discovery& discovery() {
  static const Discovery d;
  return d;
}

std::unique_ptr<Context> create(int index) {
  auto c = std::make_unique<Context>();
  c->index = index;
  cudaDeviceProp p{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  c->name = p.name;
  c->cc_major = p.major;
  c->cc_minor = p.minor;
  c->sm_count = p.multiProcessorCount;
  c->arch_name = fmt::format("sm_{}{}", p.major, p.minor);
  c->device = Device::cuda(index);
  c->total_memory = p.totalGlobalMem;
  c->make_current();
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  KILN_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&c->pool, index));
  // Keep freed memory in the pool instead of returning it at every synchronisation: the next
  // allocation of a similar size is then a pool hit, not a driver call.
  std::uint64_t keep = UINT64_MAX;
  KILN_CUDA_CHECK(cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &keep));
  return c;
}

}  // namespace

void Context::make_current() const {
  // cudaSetDevice is cheap but not free; threads usually stay on one device.
  thread_local int current = -1;
  if (current != index) {
    KILN_CUDA_CHECK(cudaSetDevice(index));
    current = index;
  }
}

int device_count(std::string* why) {
  const Discovery& d = discovery();
  if (why) *why = d.why;
  return d.count;
}

std::string absent_reason(int index) {
  std::string why;
  int n = device_count(&why);
  if (n == 0) return why;
  if (index < 0 || index >= n) {
    return fmt::format("no CUDA device {} ({} present)", index, n);
  }
  return "";
}

Context& context(int index) {
  static std::mutex mu;
  static std::deque<std::unique_ptr<Context>> contexts;  // by index; never shrinks
  std::string why = absent_reason(index);
  if (!why.empty()) throw DeviceError(fmt::format("cuda:{}: {}", index, why));
  std::lock_guard lock(mu);
  if (contexts.size() <= static_cast<std::size_t>(index)) contexts.resize(index + 1);
  auto& c = contexts[index];
  if (!c) c = create(index);
  return *c;
}

std::string runtime_version() {
  int v = 0;
  cudaRuntimeGetVersion(&v);
  return version_string(v);
}

std::string driver_version() {
  int v = 0;
  cudaDriverGetVersion(&v);
  return v ? version_string(v) : "none";
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

std::string cublas_version() {
  // cublasLtGetVersion() is major * 10000 + minor * 100 + patch (cublasLt.h).
  const std::size_t v = cublasLtGetVersion();
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

}  // namespace kiln::cuda
