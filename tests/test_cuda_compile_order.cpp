// Every order kernel (src/cuda/kernels/order.cuh and the entry points src/cuda/order_source.cpp
// generates: fill, tile, step, gather, extreme, cumsum, chunk_sums, chunk_scan) compiles with NVRTC
// for sm_90, for each dtype's source. NVRTC needs no GPU, so this runs on CI.
#include <gtest/gtest.h>

#include "cuda/nvrtc_compiler.hpp"
#include "cuda/order_source.hpp"

TEST(CudaCompileOrder, EveryEntryPointOfEveryDType) {
  for (kiln::DType t : {kiln::DType::f32, kiln::DType::i32, kiln::DType::boolean, kiln::DType::bf16,
                        kiln::DType::f16}) {
    SCOPED_TRACE(kiln::dtype_name(t));
    const std::string& src = kiln::cuda::order_source(t);
    const auto names = kiln::cuda::order_kernel_names(t);
    EXPECT_EQ(names.size(), 8u);
    for (const auto& k : names) EXPECT_NE(src.find(" " + k + "("), std::string::npos) << k;
    EXPECT_GT(kiln::cuda::compile_cubin(src, "kiln_order.cu", "sm_90").size(), 0u);
  }
}
