// Internal view of kiln::Config: what the backends ask on their hot paths.
#pragma once

#include <optional>
#include <string_view>

#include "kiln/config.hpp"

namespace kiln::detail {

// The precision precision_name() names, or nothing for another name (a store's key).
std::optional<Precision> precision_from_name(std::string_view name);

// SIMD kernels compiled in and switched on.
bool simd_live();
// Threads the CPU may use: 1 when threads are compiled out or switched off.
int thread_limit();
// The fusion decorator compiled in and switched on.
bool fusion_live();
// Matmul autotune compiled in and switched on.
bool autotune_live();
// cuDNN's attention compiled in and switched on (libcudnn may still be absent).
bool cudnn_live();
// The persistent store compiled in and switched on.
bool persistence_live();

// features() without the devices: the run-time switches, compiled in or not, live or not, and
// why (src/dispatch/features.cpp adds the CUDA backend's line).
std::vector<FeatureState> switch_states();

// What set_config runs before it switches fusion on or off: the registry's flush of every fusion
// decorator's recorded ops (so no pending tensor outlives its decorator). The registry sets it
// when it makes its first chain; before that nothing can have been recorded.
void set_before_fusion_switch(void (*flush)());

}  // namespace kiln::detail
