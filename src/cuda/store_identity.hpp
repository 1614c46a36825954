// The store's identity of a CUDA device and the software that tunes and compiles for it: what a
// stored tune result or cubin depends on (src/store/store.hpp).
#pragma once

#if KILN_WITH_PERSISTENCE
#include "cuda/context.hpp"
#include "store/store.hpp"

namespace kiln::cuda {

// Device name and compute capability, driver, runtime, cuBLASLt and NVRTC versions, kiln's.
store::Identity store_identity(const Context& ctx);

}  // namespace kiln::cuda
#endif
