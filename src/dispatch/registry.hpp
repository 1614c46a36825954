// The device registry: which backend chain serves each device.
#pragma once

#include "backend/backend.hpp"

namespace kiln::detail {

// The backend chain of a device (created at first use): the fusion decorator over the device's
// backend while fusion is live, else the backend itself. Throws DeviceError if absent.
Backend& backend(Device device);
// Runs what every fusion decorator has recorded (before fusion is switched off).
void flush_fused_devices();

// Why CUDA device `index` is absent, or empty when it is present.
std::string cuda_absent_reason(int index);
// The number of CUDA devices kiln can use (0 without the backend, a driver or a device).
int cuda_device_count();

}  // namespace kiln::detail
