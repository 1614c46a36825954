#include "cuda/random_source.hpp"

#include "embed/cuda/kernels/random.cuh.hpp"

namespace kiln::cuda {

// Nothing in it varies: the source is src/cuda/kernels/random.cuh as it is.
const std::string& random_source() {
  static const std::string s(embed::cuda_kernels_random_cuh);
  return s;
}

}  // namespace kiln::cuda
