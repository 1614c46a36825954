// Devices: where tensors live and which backend chain runs their ops.
#pragma once

#include <string>
#include <vector>

namespace kiln {

class Device {
 public:
  enum class Kind : unsigned char { cpu, cuda };

  static Device cpu();
  // Throws DeviceError naming why when CUDA device `index` is absent.
  static Device cuda(int index = 0);
  // The fastest device present: the first CUDA device, else the CPU.
  static Device best();

  Kind kind() const { return kind_; }
  int index() const { return index_; }
  // "cpu", "cuda:0"
  std::string str() const;
  // The composed backend chain, e.g. "dispatch<cpu<avx2>>".
  std::string backend_name() const;
  // Waits for every op queued on this device.
  void sync() const;

  friend bool operator==(const Device& a, const Device& b) {
    return a.kind_ == b.kind_ && a.index_ == b.index_;
  }

 private:
  Device(Kind kind, int index) : kind_(kind), index_(index) {}
  Kind kind_;
  int index_;
};

// One line of kiln::devices(): a device that is present, or a kind that is absent and why.
struct DeviceInfo {
  std::string name;  // "cpu", "cuda:0", "cuda"
  bool present = false;
  std::string backend_name;  // when present
  std::string reason;        // when absent, e.g. "no CUDA driver"
  // When present: what each part of the chain reports of itself, outermost first, e.g.
  // {"cpu<avx3>", "blas", "OpenBLAS 0.3.21 ..."} (kiln info prints them).
  struct Fact {
    std::string part, name, value;
  };
  std::vector<Fact> facts;
};

// What is present, and for what is absent, why.
std::vector<DeviceInfo> devices();
// The line of devices() for one present device, opening that device only (devices() opens every
// device it lists). Throws DeviceError for an absent one.
DeviceInfo device_info(Device device);

}  // namespace kiln
