// Device -> backend chain, and the composed names users see.
#include "dispatch/registry.hpp"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>

#include "core/runtime_config.hpp"
#include "cpu/cpu_backend.hpp"
#include "kiln/config.hpp"
#include "kiln/error.hpp"
#if KILN_WITH_FUSION
#include "fusion/fusion_backend.hpp"
#endif
#if KILN_WITH_CUDA
#include "cuda/context.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/nvrtc_compiler.hpp"
#endif

namespace kiln {
namespace detail {

namespace {

// One device's chain: its backend and, when compiled in, the fusion decorator over it.
struct Chain {
  std::unique_ptr<Backend> inner;
#if KILN_WITH_FUSION
  std::unique_ptr<fusion::Fusion> fused;
#endif
  explicit Chain(std::unique_ptr<Backend> b) : inner(std::move(b)) {
    // The environment's switches (KILN_LOG included) are checked at a device's first op in every
    // build, also one whose compiled-in features never read the configuration; a bad value
    // throws here, and the chain is made again at the next op.
    (void)kiln::config();
#if KILN_WITH_FUSION
    fused = std::make_unique<fusion::Fusion>(*inner);
    set_before_fusion_switch(&flush_fused_devices);
#endif
  }
  Backend& live() {
#if KILN_WITH_FUSION
    if (fusion_live()) return *fused;
#endif
    return *inner;
  }
};

#if KILN_WITH_CUDA || KILN_WITH_FUSION
// The CUDA devices' chains, by device index, made at first use and never destroyed. Every op
// looks its device's chain up, so a lookup is one atomic load; only making one takes the lock.
constexpr std::size_t kMaxCudaDevices = 64;
std::mutex chains_mu;
std::array<std::atomic<Chain*>, kMaxCudaDevices> cuda_chains{};
#endif
Chain& cpu_chain() {
  static Chain chain(std::make_unique<cpu::CpuBackend>());
  return chain;
}

}  // namespace

Backend& backend(Device device) {
  if (device.kind() == Device::Kind::cpu) return cpu_chain().live();
#if KILN_WITH_CUDA
  const auto i = static_cast<std::size_t>(device.index());
  if (i >= kMaxCudaDevices)
    throw DeviceError(
        fmt::format("{}: kiln drives at most {} CUDA devices", device.str(), kMaxCudaDevices));
  Chain* chain = cuda_chains[i].load(std::memory_order_acquire);
  if (!chain) {
    std::lock_guard lock(chains_mu);
    chain = cuda_chains[i].load(std::memory_order_relaxed);
    if (!chain) {
      chain = new Chain(std::make_unique<cuda::CudaBackend>(device.index()));
      cuda_chains[i].store(chain, std::memory_order_release);
    }
  }
  return chain->live();
#else
  throw DeviceError(device.str() + ": " + cuda_absent_reason(device.index()));
#endif
}

void flush_fused_devices() {
#if KILN_WITH_FUSION
  cpu_chain().fused->flush();
  for (auto& chain : cuda_chains)
    if (Chain* c = chain.load(std::memory_order_acquire)) c->fused->flush();
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
  return {s.compiles, s.seconds, s.loaded, s.load_seconds};
#else
  return {};
#endif
}

FusionStats fusion_stats() {
#if KILN_WITH_FUSION
  return fusion::stats();
#else
  return {};
#endif
}

std::string fusion_summary() {
#if KILN_WITH_FUSION
  return fusion::summary();
#else
  return "nothing recorded: kiln was built with -DKILN_FUSION=OFF";
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
