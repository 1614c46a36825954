// Every indexing kernel (src/cuda/kernels/index.cuh and the entry points src/cuda/index_source.cpp
// generates: copies by element and vector size, accumulation per dtype, atomic and deterministic)
// compiles with NVRTC for sm_90. NVRTC needs no GPU, so this runs on CI.
#include <gtest/gtest.h>

#include "cuda/index_source.hpp"
#include "cuda/nvrtc_compiler.hpp"

TEST(CudaCompileIndex, EveryEntryPoint) {
  const std::string& src = kiln::cuda::index_source();
  const auto names = kiln::cuda::index_kernel_names();
  EXPECT_EQ(names.size(), 3u + 4u + 4u * 6u + 1u);
  for (const auto& k : names) EXPECT_NE(src.find(" " + k + "("), std::string::npos) << k;
  EXPECT_GT(kiln::cuda::compile_cubin(src, "kiln_index.cu", "sm_90").size(), 0u);
}
