#include "cuda/random_source.hpp"

#include "embed/cuda/kernels/random.cuh.hpp"
#include "ir/cuda_codegen.hpp"

namespace kiln::cuda {

// Nothing in it varies: the prelude, then src/cuda/kernels/random.cuh as it is.
const std::string& random_source() {
  static const std::string s = ir::cuda_prelude() + std::string(embed::cuda_kernels_random_cuh);
  return s;
}

}  // namespace kiln::cuda
