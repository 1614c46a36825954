// kiln::features(): the run-time switches (src/core/runtime_config.cpp) and whether the CUDA
// backend can run, which only the composition root knows.
#include "core/runtime_config.hpp"
#include "dispatch/registry.hpp"
#include "kiln/config.hpp"

namespace kiln {

std::vector<FeatureState> features() {
  std::vector<FeatureState> out = detail::switch_states();
  const std::string cuda_why = detail::cuda_absent_reason(0);
  out.push_back(
      {"cuda", KILN_WITH_CUDA != 0, cuda_why.empty(), cuda_why.empty() ? "on" : cuda_why});
  return out;
}

}  // namespace kiln
