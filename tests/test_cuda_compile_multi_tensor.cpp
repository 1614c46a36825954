// The multi-tensor kernels (src/cuda/kernels/sum_of_squares.cuh and adamw.cuh, with the entry
// points src/cuda/sum_of_squares.cpp and adamw.cpp write) compile with NVRTC for sm_90. NVRTC
// needs no GPU, so this runs on CI.
#include <gtest/gtest.h>

#include <string>

#include "cuda/cuda_ops.hpp"
#include "cuda/nvrtc_compiler.hpp"

TEST(CudaCompileMultiTensor, SumOfSquares) {
  const std::string& src = kiln::cuda::sum_of_squares_source();
  for (const char* k : {"kiln_sum_of_squares", "kiln_sum_of_squares_finish"})
    EXPECT_NE(src.find(std::string(" ") + k + "("), std::string::npos) << k;
  EXPECT_GT(kiln::cuda::compile_cubin(src, "kiln_sum_of_squares.cu", "sm_90").size(), 0u);
}

TEST(CudaCompileMultiTensor, AdamW) {
  const std::string& src = kiln::cuda::adamw_source();
  EXPECT_NE(src.find(" kiln_adamw("), std::string::npos);
  EXPECT_GT(kiln::cuda::compile_cubin(src, "kiln_adamw.cu", "sm_90").size(), 0u);
}
