#include "core/new_cuda_kernels.hpp"

#include <cstdlib>
#include <string_view>

namespace kiln::detail {

bool new_cuda_kernels() {
  const char* v = std::getenv("KILN_CUDA_NEW_KERNELS");
  return v && std::string_view(v) == "1";
}

}  // namespace kiln::detail
