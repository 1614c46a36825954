// Internal view of kiln::Config: what the backends ask on their hot paths.
#pragma once

#include "kiln/config.hpp"

namespace kiln::detail {

// SIMD kernels compiled in and switched on.
bool simd_live();
// Threads the CPU may use: 1 when threads are compiled out or switched off.
int thread_limit();
// The fusion decorator compiled in and switched on.
bool fusion_live();
// Matmul autotune compiled in and switched on.
bool autotune_live();
// The persistent store compiled in and switched on.
bool persistence_live();

}  // namespace kiln::detail
