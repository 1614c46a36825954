// The attention kernels (src/cuda/kernels/attention.cuh, attention_backward.cuh and the entry
// points src/cuda/attention.cpp generates) compile with NVRTC for sm_90 for every dtype and every
// head dim it is built for. NVRTC needs no GPU, so this runs on CI.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/cuda_ops.hpp"
#include "cuda/nvrtc_compiler.hpp"

TEST(CudaCompileAttention, EveryDTypeAndHeadDim) {
  for (kiln::DType t : {kiln::DType::f32, kiln::DType::bf16, kiln::DType::f16}) {
    for (int d : {48, 64, 128}) {
      for (const bool backward : {false, true}) {
        const std::string& src = kiln::cuda::attention_source(t, d, backward);
        SCOPED_TRACE(kiln::cuda::attention_kernel_name(t, d, backward ? "dq" : "fwd"));
        for (const char* pass :
             backward ? std::vector<const char*>{"dq", "dkv"} : std::vector<const char*>{"fwd"}) {
          const std::string name = kiln::cuda::attention_kernel_name(t, d, pass);
          EXPECT_NE(src.find(" " + name + "("), std::string::npos) << name;
        }
        EXPECT_GT(kiln::cuda::compile_cubin(src, "kiln_attention.cu", "sm_90").size(), 0u);
      }
    }
  }
}

TEST(CudaCompileAttention, HeadDimsWithoutAKernel) {
  using kiln::cuda::attention_kernel_available;
  EXPECT_TRUE(attention_kernel_available(kiln::DType::bf16, 64));
  EXPECT_FALSE(attention_kernel_available(kiln::DType::bf16, 8));
  EXPECT_FALSE(attention_kernel_available(kiln::DType::bf16, 72));
  EXPECT_FALSE(attention_kernel_available(kiln::DType::f16, 256));
}
