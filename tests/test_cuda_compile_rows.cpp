// Every row kernel (src/cuda/kernels/rows.cuh and the entry points src/cuda/rows_source.cpp
// generates: softmax and the norms, register-held and streaming, 16-byte and single-element loads)
// compiles with NVRTC for sm_90, for each dtype's source, as do the norms' backward kernels. NVRTC
// needs no GPU, so this runs on CI.
#include <gtest/gtest.h>

#include "cuda/cuda_ops.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "cuda/rows_source.hpp"

TEST(CudaCompileRows, EveryEntryPointOfEveryDType) {
  for (kiln::DType t : {kiln::DType::f32, kiln::DType::bf16, kiln::DType::f16}) {
    SCOPED_TRACE(kiln::dtype_name(t));
    const std::string& src = kiln::cuda::rows_source(t, t);
    const auto names = kiln::cuda::rows_kernel_names(t, t);
    // {softmax, norm} x ({V = 1} x {stream, K = 1, 2, 4, 8} + {16 bytes} x {stream, K <= 32 / V})
    EXPECT_EQ(names.size(), 2u * (5u + (t == kiln::DType::f32 ? 5u : 4u)));
    for (const auto& k : names) EXPECT_NE(src.find(" " + k + "("), std::string::npos) << k;
    EXPECT_GT(kiln::cuda::compile_cubin(src, "kiln_rows.cu", "sm_90").size(), 0u);
  }
  // The norms of f32 rows into a half y (8-byte stores at the f32 width).
  for (kiln::DType y : {kiln::DType::bf16, kiln::DType::f16}) {
    SCOPED_TRACE(std::string("f32 -> ") + kiln::dtype_name(y));
    const std::string& src = kiln::cuda::rows_source(kiln::DType::f32, y);
    const auto names = kiln::cuda::rows_kernel_names(kiln::DType::f32, y);
    EXPECT_EQ(names.size(), 10u);
    for (const auto& k : names) EXPECT_NE(src.find(" " + k + "("), std::string::npos) << k;
    EXPECT_EQ(src.find("kr::softmax_"), std::string::npos);
    EXPECT_GT(kiln::cuda::compile_cubin(src, "kiln_rows.cu", "sm_90").size(), 0u);
  }
}

// The norms of x + residual (a pre-norm block's residual add in the norm's pass): the residual of
// x's dtype or a half type for f32 rows, y likewise.
TEST(CudaCompileRows, EveryAddNormEntryPoint) {
  using kiln::DType;
  const DType triples[][3] = {{DType::f32, DType::f32, DType::f32},
                              {DType::bf16, DType::bf16, DType::bf16},
                              {DType::f16, DType::f16, DType::f16},
                              {DType::f32, DType::bf16, DType::bf16},
                              {DType::f32, DType::f16, DType::f32}};
  for (const auto& [t, y, r] : triples) {
    SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " y " + kiln::dtype_name(y) + " residual " +
                 kiln::dtype_name(r));
    const std::string& src = kiln::cuda::rows_source(t, y, r);
    const auto names = kiln::cuda::rows_kernel_names(t, y, r);
    EXPECT_EQ(names.size(), 5u + (t == DType::f32 ? 5u : 4u));
    for (const auto& k : names) {
      EXPECT_NE(k.find("_addnorm_"), std::string::npos) << k;
      EXPECT_NE(src.find(" " + k + "("), std::string::npos) << k;
    }
    EXPECT_EQ(src.find("kr::softmax_"), std::string::npos);
    EXPECT_GT(kiln::cuda::compile_cubin(src, "kiln_rows.cu", "sm_90").size(), 0u);
  }
}

// The norms' backward (src/cuda/kernels/norm_backward.cuh and src/cuda/norm_backward.cpp's entry
// points: 16-byte and single-element loads, every register count, and the partials' sum).
TEST(CudaCompileRows, EveryNormBackwardEntryPoint) {
  using kiln::DType;
  const std::pair<DType, DType> pairs[] = {{DType::f32, DType::f32},
                                           {DType::bf16, DType::bf16},
                                           {DType::f16, DType::f16},
                                           {DType::f32, DType::bf16},
                                           {DType::f32, DType::f16}};
  for (const auto& [t, g] : pairs) {
    SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " g " + kiln::dtype_name(g));
    const std::string& src = kiln::cuda::norm_backward_source(t, g);
    const auto names = kiln::cuda::norm_backward_kernel_names(t, g);
    // {V = 1} x {K = 1..16} + {16 bytes} x {K <= 16 / V} + the finishing kernel
    EXPECT_EQ(names.size(), 5u + (t == DType::f32 ? 3u : 2u) + 1u);
    for (const auto& k : names) EXPECT_NE(src.find(" " + k + "("), std::string::npos) << k;
    EXPECT_GT(kiln::cuda::compile_cubin(src, "kiln_norm_backward.cu", "sm_90").size(), 0u);
  }
  // dx also rounded to a half type (a half residual's gradient), g f32 or half.
  for (const auto& [g, h] :
       {std::pair{DType::f32, DType::bf16}, std::pair{DType::bf16, DType::bf16},
        std::pair{DType::f16, DType::f16}}) {
    SCOPED_TRACE(std::string("f32 g ") + kiln::dtype_name(g) + " dx_half " + kiln::dtype_name(h));
    const std::string& src = kiln::cuda::norm_backward_source(DType::f32, g, h);
    const auto names = kiln::cuda::norm_backward_kernel_names(DType::f32, g, h);
    EXPECT_EQ(names.size(), 9u);
    for (const auto& k : names) {
      EXPECT_NE(k.find(std::string("_h") + kiln::dtype_name(h)), std::string::npos) << k;
      EXPECT_NE(src.find(" " + k + "("), std::string::npos) << k;
    }
    EXPECT_GT(kiln::cuda::compile_cubin(src, "kiln_norm_backward.cu", "sm_90").size(), 0u);
  }
}
