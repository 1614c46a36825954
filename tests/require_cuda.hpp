// For the CUDA tests: why cuda:0 cannot be used (empty when it can), and a skip with that reason
// where no GPU is present (CI), so the same tests run in full on the GPU machine.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "cuda/context.hpp"

namespace kt {

inline std::string cuda_reason() { return kiln::cuda::absent_reason(0); }

}  // namespace kt

#define KILN_REQUIRE_CUDA()                                                        \
  do {                                                                             \
    if (!kt::cuda_reason().empty()) GTEST_SKIP() << "cuda: " << kt::cuda_reason(); \
  } while (0)
