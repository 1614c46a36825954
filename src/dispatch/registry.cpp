// Device -> backend chain, and the composed names users see.
#include "dispatch/registry.hpp"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/runtime_config.hpp"
#include "cpu/cpu_backend.hpp"
#include "kiln/config.hpp"
#include "kiln/error.hpp"
#if KILN_WITH_FUSION
#include "fusion/fusion_backend.hpp"
#endif
#if KILN_WITH_AUTODIFF
#include "autodiff/autodiff_backend.hpp"
#endif
#if KILN_WITH_CUDA
#include "cuda/context.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/nvrtc_compiler.hpp"
#endif

namespace kiln {
namespace detail {

namespace {

// The decorators of every device's chain, innermost first: adding one is one line here. `live`
// says whether the decorator is in the chain now (a feature switched off at run time is left
// out); nullptr means always.
struct DecoratorKind {
  bool (*live)();
  std::unique_ptr<Backend> (*make)(Backend& inner);
};
constexpr DecoratorKind kDecoratorList[] = {
#if KILN_WITH_FUSION
    {fusion_live,
     [](Backend& inner) -> std::unique_ptr<Backend> {
       return std::make_unique<fusion::Fusion>(inner);
     }},
#endif
#if KILN_WITH_AUTODIFF
    {nullptr,  // always live: a tensor that needs no gradient costs one check per input
     [](Backend& inner) -> std::unique_ptr<Backend> {
       return std::make_unique<autodiff::Autodiff>(inner);
     }},
#endif
    {nullptr, nullptr},  // (the end: an array cannot be empty)
};
constexpr std::span<const DecoratorKind> kDecorators(kDecoratorList, std::size(kDecoratorList) - 1);
static_assert(std::size(kDecoratorList) - 1 < 8, "a chain's stacks are indexed by a byte");

// One device's chain: its backend, and one stack of decorators over it for each set of live
// decorators met so far (made at first use, kept while the process lives, so a tensor recorded
// by a decorator never outlives it). Every op asks for the stack of the decorators live now.
class Chain {
 public:
  explicit Chain(std::unique_ptr<Backend> b) : backend_(std::move(b)) {
    // The environment's switches (KILN_LOG included) are checked at a device's first op in every
    // build, also one whose compiled-in features never read the configuration; a bad value
    // throws here, and the chain is made again at the next op.
    (void)kiln::config();
    if (!kDecorators.empty()) set_before_fusion_switch(&flush_fused_devices);
  }

  Backend& live() {
    unsigned mask = 0, bit = 1;
    for (const DecoratorKind& d : kDecorators) {
      if (!d.live || d.live()) mask |= bit;
      bit <<= 1;
    }
    if (Backend* top = tops_[mask].load(std::memory_order_acquire)) return *top;
    std::lock_guard lock(mu_);
    if (Backend* top = tops_[mask].load(std::memory_order_relaxed)) return *top;
    Backend* top = backend_.get();
    bit = 1;
    for (const DecoratorKind& d : kDecorators) {
      if (mask & bit) {
        owned_.push_back(d.make(*top));
        top = owned_.back().get();
      }
      bit <<= 1;
    }
    tops_[mask].store(top, std::memory_order_release);
    return *top;
  }

  // Runs what every stack's decorators have recorded.
  void flush() {
    std::lock_guard lock(mu_);
    for (auto& top : tops_)
      if (Backend* b = top.load(std::memory_order_acquire)) b->flush();
  }

 private:
  std::unique_ptr<Backend> backend_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Backend>> owned_;
  std::array<std::atomic<Backend*>, std::size_t{1} << (std::size(kDecoratorList) - 1)> tops_{};
};

#if KILN_WITH_CUDA
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
  cpu_chain().flush();
#if KILN_WITH_CUDA
  for (auto& chain : cuda_chains)
    if (Chain* c = chain.load(std::memory_order_acquire)) c->flush();
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

namespace {

// The dtypes the chain runs each kind of op on (Backend::supports, asked with one dtype for
// every operand), so that a dtype a backend lacks shows in `kiln info` before a call fails.
void add_dtype_facts(const detail::Backend& chain, std::vector<DeviceInfo::Fact>& out) {
  using detail::BackendOp;
  for (BackendOp op : {BackendOp::elementwise, BackendOp::reduce, BackendOp::matmul,
                       BackendOp::random, BackendOp::index, BackendOp::rows, BackendOp::order,
                       BackendOp::attention, BackendOp::collective}) {
    std::string list;
    for (int i = 0; i < detail::kNumDTypes; ++i) {
      const auto t = static_cast<DType>(i);
      const DType operands[] = {t, t};
      if (!chain.supports(op, std::span<const DType>(operands, op == BackendOp::matmul ? 2 : 1)))
        continue;
      if (!list.empty()) list += ' ';
      list += dtype_name(t);
    }
    out.push_back({chain.name(), std::string(detail::backend_op_name(op)) + " dtypes",
                   list.empty() ? "none" : list});
  }
}

// What each part of device's live chain reports (Backend::features), outermost first, then the
// dtypes the chain runs.
std::vector<DeviceInfo::Fact> facts(Device device) {
  std::vector<DeviceInfo::Fact> out;
  for (const detail::Backend* b = &detail::backend(device); b;) {
    for (const detail::BackendFeature& f : b->features())
      out.push_back({b->name(), f.name, f.value});
    const auto* d = dynamic_cast<const detail::Decorator*>(b);
    b = d ? &d->inner() : nullptr;
  }
  add_dtype_facts(detail::backend(device), out);
  return out;
}

}  // namespace

DeviceInfo device_info(Device device) {
  return {device.str(), true, device.backend_name(), "", facts(device)};
}

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  out.push_back(device_info(Device::cpu()));
  const int n = detail::cuda_device_count();
  for (int i = 0; i < n; ++i) out.push_back(device_info(Device::cuda(i)));
  if (n == 0) out.push_back({"cuda", false, "", detail::cuda_absent_reason(0), {}});
  return out;
}

}  // namespace kiln
