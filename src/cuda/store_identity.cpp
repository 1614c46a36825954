#include "cuda/store_identity.hpp"

#if KILN_WITH_PERSISTENCE
#include <fmt/format.h>

namespace kiln::cuda {

store::Identity store_identity(const Context& ctx) {
  store::Identity id;
  id.device = ctx.name;
  id.compute_capability = fmt::format("{}.{}", ctx.cc_major, ctx.cc_minor);
  id.driver = driver_version();
  id.cuda_runtime = runtime_version();
  id.cublas = cublas_version();
  id.nvrtc = nvrtc_version();
  return id;
}

}  // namespace kiln::cuda
#endif
