// Precompiles (src/cuda/precompile.hpp): the first compile of a process on a device whose backend
// is made queues the fixed kernels on the background compile thread, so that their first use
// compiles nothing on the caller's thread.
// Without a GPU these skip with the reason cuda::absent_reason gives.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "cuda/context.hpp"
#include "cuda/matmul/gemm_source.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "cuda/random_source.hpp"
#include "cuda/reduce_source.hpp"
#include "kiln/kiln.hpp"
#include "require_cuda.hpp"
#include "test_support.hpp"

namespace {

namespace cuda = kiln::cuda;

// Waits up to two minutes for `source`'s kernel to be ready without compiling on this thread.
cudaKernel_t wait_ready(const std::string& source, const std::string& kernel,
                        const std::string& arch) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  cudaKernel_t k = nullptr;
  while (!(k = cuda::ready_kernel(source, kernel, arch)) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return k;
}

TEST(CudaPrecompile, TheFirstCompileMakesTheFixedKernelsReadyOffTheCallersThread) {
  if (!kt::cuda_reason().empty()) GTEST_SKIP() << "cuda: " << kt::cuda_reason();
  const auto device = kiln::Device::cuda(0);
  (void)device.backend_name();  // the backend is made (and its precompiles queued) once
  cuda::Context& ctx = cuda::context(0);
  ctx.make_current();
  const std::string arch = ctx.arch();
  // A compile on this thread (a kernel nothing has seen), as a first process's first op makes:
  // it queues the precompiles, if no earlier test's compile did.
  const std::string fresh = "extern \"C\" __global__ void k(float* x) { x[0] = " +
                            std::to_string(kt::fresh_seed() % 1000000) + ".0f; }\n";
  ASSERT_NE(cuda::cached_kernel(fresh, "fresh.cu", "k", arch), nullptr);
  const auto before = cuda::compile_stats();

  EXPECT_NE(wait_ready(cuda::random_source(), "kiln_normal", arch), nullptr);
  cuda::ReduceKernelSpec row;
  row.op = kiln::detail::ReduceOp::max;
  row.outer_rank = 1;
  EXPECT_NE(wait_ready(cuda::reduce_source({&row, 1}), cuda::reduce_kernel_name(row), arch),
            nullptr);
  const cuda::GemmKernelSpec gemm{cuda::GemmVariant::tf32x3,
                                  cuda::GemmTile::t128x128,
                                  {cuda::GemmLoad::k_unit, true},
                                  {cuda::GemmLoad::k_unit, true}};
  EXPECT_NE(wait_ready(cuda::gemm_source({&gemm, 1}), cuda::gemm_kernel_name(gemm), arch), nullptr);
  EXPECT_EQ(cuda::compile_stats().compiles, before.compiles);

  // Their first use compiles nothing on this thread, and computes.
  const auto x =
      kiln::Tensor<2>::random({64, 300}, kiln::Distribution::normal(), device, kt::fresh_seed());
  const auto m = x.to(kiln::Device::cpu()).max(1).to_vector<float>();
  EXPECT_EQ(x.max(1).to_vector<float>(), m);
  EXPECT_EQ(cuda::compile_stats().compiles, before.compiles);
}

}  // namespace
