// Device -> backend chain, and the composed names users see.
#include "dispatch/registry.hpp"

#include "cpu/cpu_backend.hpp"
#include "kiln/error.hpp"

namespace kiln {
namespace detail {

Backend& backend(Device device) {
  if (device.kind() == Device::Kind::cpu) {
    static cpu::CpuBackend cpu_backend;
    return cpu_backend;
  }
  throw DeviceError(device.str() + ": " + cuda_absent_reason(device.index()));
}

std::string cuda_absent_reason(int /*index*/) {
  return "kiln was built without a CUDA backend (not implemented yet)";
}

}  // namespace detail

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
  std::string why = detail::cuda_absent_reason(0);
  if (why.empty()) {
    out.push_back({"cuda:0", true, Device::cuda(0).backend_name(), ""});
  } else {
    out.push_back({"cuda", false, "", why});
  }
  return out;
}

}  // namespace kiln
