// Every reduction kernel the CUDA source generator can produce compiles with NVRTC for sm_90:
// every op x dtype x variant x index width, at representative ranks (src/cuda/reduce_source.hpp).
// NVRTC needs no GPU, so this runs on CI. The kernels come batched in a few sources, compiled
// on two threads, to keep the test to seconds.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "cuda/nvrtc_compiler.hpp"
#include "cuda/reduce_source.hpp"

namespace {

using kiln::DType;
using kiln::cuda::ReduceKernelSpec;
using kiln::cuda::ReduceVariant;
using kiln::detail::ReduceOp;

TEST(CudaCompileReduce, EveryOpDTypeVariantAndIndexWidth) {
  const auto sources = kiln::cuda::all_reduce_sources_for_tests();
  ASSERT_EQ(sources.size(), 4u);  // one per variant
  std::vector<std::future<std::vector<char>>> cubins;
  for (const auto& s : sources) {
    // Every entry point is defined exactly where the source says.
    for (const auto& k : s.kernels) {
      EXPECT_NE(s.source.find(" " + k + "("), std::string::npos) << s.name << ": " << k;
    }
    cubins.push_back(std::async(
        std::launch::async, [&s] { return kiln::cuda::compile_cubin(s.source, s.name, "sm_90"); }));
  }
  for (std::size_t i = 0; i < cubins.size(); ++i) {
    SCOPED_TRACE(sources[i].name);
    EXPECT_GT(cubins[i].get().size(), 0u);
  }
}

// The run-time form: one kernel per source (plus combine for a split), at a rank the batch
// above does not use.
TEST(CudaCompileReduce, SingleKernelSource) {
  const ReduceKernelSpec spec{
      ReduceOp::argmin, DType::f32, 4, 1, ReduceVariant::thread_split, true};
  const std::string src = kiln::cuda::reduce_source({&spec, 1});
  EXPECT_NE(src.find(kiln::cuda::reduce_kernel_name(spec)), std::string::npos);
  EXPECT_NE(src.find(kiln::cuda::reduce_combine_name(ReduceOp::argmin, DType::f32)),
            std::string::npos);
  EXPECT_GT(kiln::cuda::compile_cubin(src, "single.cu", "sm_90").size(), 0u);
}

// Names are distinct across everything a kernel is specialised on.
TEST(CudaCompileReduce, KernelNamesAreDistinct) {
  using kiln::cuda::reduce_kernel_name;
  const ReduceKernelSpec a{ReduceOp::sum, DType::i32, 1, 1, ReduceVariant::block, false};
  ReduceKernelSpec b = a;
  b.wide_index = true;
  EXPECT_NE(reduce_kernel_name(a), reduce_kernel_name(b));
  b = a;
  b.variant = ReduceVariant::block_split;
  EXPECT_NE(reduce_kernel_name(a), reduce_kernel_name(b));
  b = a;
  b.dtype = DType::boolean;
  EXPECT_NE(reduce_kernel_name(a), reduce_kernel_name(b));
  b = a;
  b.outer_rank = 2;
  EXPECT_NE(reduce_kernel_name(a), reduce_kernel_name(b));
}

}  // namespace
