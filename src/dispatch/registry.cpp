// Device -> backend chain, and the composed names users see.
#include "dispatch/registry.hpp"

#include <deque>
#include <memory>
#include <mutex>

#include "cpu/cpu_backend.hpp"
#include "kiln/config.hpp"
#include "kiln/error.hpp"
#if KILN_WITH_CUDA
#include "cuda/context.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/nvrtc_compiler.hpp"
#endif

namespace kiln {
namespace detail {

Backend& backend(Device device) {
  if (device.kind() == Device::Kind::cpu) {
    static cpu::CpuBackend cpu_backend;
    return cpu_backend;
  }
#if KILN_WITH_CUDA
  static std::mutex mu;
  static std::deque<std::unique_ptr<Backend>> cuda_backends;  // by device index
  std::lock_guard lock(mu);
  const auto i = static_cast<std::size_t>(device.index());
  if (cuda_backends.size() <= i) cuda_backends.resize(i + 1);
  if (!cuda_backends[i]) cuda_backends[i] = std::make_unique<cuda::CudaBackend>(device.index());
  return *cuda_backends[i];
#else
  throw DeviceError(device.str() + ": " + cuda_absent_reason(device.index()));
#endif
}

std::string cuda_absent_reason([[maybe_unused]] int index) {
#if KILN_WITH_CUDA
  return cuda::absent_reason(index);
#else
  return "kiln was built without the CUDA backend (" KILN_CUDA_WHY ")";
#endif
}

int cuda_device_count() {
#if KILN_WITH_CUDA
  return cuda::device_count(nullptr);
#else
  return 0;
#endif
}

}  // namespace detail

CompileStats compile_stats() {
#if KILN_WITH_CUDA
  const auto s = cuda::compile_stats();
  return {s.compiles, s.seconds};
#else
  return {};
#endif
}

Device Device::cpu() { return Device(Kind::cpu, 0); }

Device Device::cuda(int index) {
  if (index < 0) throw DeviceError("cuda:" + std::to_string(index) + ": negative device index");
  std::string why = detail::cuda_absent_reason(index);
  if (!why.empty()) throw DeviceError("cuda:" + std::to_string(index) + ": " + why);
  return Device(Kind::cuda, index);
}

Device Device::best() {
  if (detail::cuda_absent_reason(0).empty()) return cuda(0);
  return cpu();
}

std::string Device::str() const {
  return kind_ == Kind::cpu ? "cpu" : "cuda:" + std::to_string(index_);
}

std::string Device::backend_name() const {
  return "dispatch<" + detail::backend(*this).name() + ">";
}

void Device::sync() const { detail::backend(*this).sync(); }

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  out.push_back({"cpu", true, Device::cpu().backend_name(), ""});
  const int n = detail::cuda_device_count();
  for (int i = 0; i < n; ++i) {
    Device d = Device::cuda(i);
    out.push_back({d.str(), true, d.backend_name(), ""});
  }
  if (n == 0) out.push_back({"cuda", false, "", detail::cuda_absent_reason(0)});
  return out;
}

}  // namespace kiln
