#include "cuda/store_identity.hpp"

#if KILN_WITH_PERSISTENCE
#include <cublasLt.h>
#include <fmt/format.h>

namespace kiln::cuda {

store::Identity store_identity(const Context& ctx) {
  store::Identity id;
  id.device = ctx.name;
  id.compute_capability = fmt::format("{}.{}", ctx.cc_major, ctx.cc_minor);
  id.driver = driver_version();
  id.cuda_runtime = runtime_version();
  // cublasLtGetVersion() is major * 10000 + minor * 100 + patch (cublasLt.h).
  const std::size_t v = cublasLtGetVersion();
  id.cublas = fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
  id.nvrtc = nvrtc_version();
  return id;
}

}  // namespace kiln::cuda
#endif
