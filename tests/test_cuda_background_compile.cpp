// Background compiles (src/cuda/nvrtc_compiler.hpp): a source queued with compile_in_background
// is compiled off the caller's thread, once; cached_kernel waits for that compile rather than
// start its own, and ready_kernel, which never compiles, finds the kernel once it is done.
// Without a GPU these skip with the reason cuda::absent_reason gives.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "cuda/context.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "require_cuda.hpp"
#include "test_support.hpp"

namespace {

namespace cuda = kiln::cuda;

// A kernel no other test, process or store has seen: it writes `value` to x[0].
std::string fresh_source(float& value) {
  value = static_cast<float>(kt::fresh_seed() % 1000000);
  return fmt::format("extern \"C\" __global__ void k(float* x) {{ x[0] = {:.1f}f; }}\n", value);
}

// Launches k on one float and returns what it wrote.
float run(cuda::Context& ctx, cudaKernel_t k) {
  const auto buffer = cuda::device_alloc(ctx, sizeof(float));
  float* x = static_cast<float*>(buffer->data());
  void* args[] = {&x};
  EXPECT_EQ(
      cudaLaunchKernel(reinterpret_cast<const void*>(k), dim3(1), dim3(1), args, 0, ctx.stream),
      cudaSuccess);
  float got = -1;
  EXPECT_EQ(cudaStreamSynchronize(ctx.stream), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(&got, x, sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);
  return got;
}

// A fresh source on cuda:0, and the compile counts before anything was done with it.
class CudaBackgroundCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kt::cuda_reason().empty()) GTEST_SKIP() << "cuda: " << kt::cuda_reason();
    ctx_ = &cuda::context(0);
    ctx_->make_current();
    drain_background();
    source_ = fresh_source(value_);
    before_ = cuda::compile_stats();
  }
  // Waits until compiles queued earlier (an earlier test's matmul queues kiln's own GEMM
  // candidates) have ended, so that they cannot count as this test's: the one background thread
  // works in queue order, so a fresh source queued now is ready only after them.
  void drain_background() {
    float unused = 0;
    const std::string marker = fresh_source(unused);
    cuda::compile_in_background(marker, "drain.cu", ctx_->arch());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!cuda::ready_kernel(marker, "k", ctx_->arch()) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  cuda::Context* ctx_ = nullptr;
  float value_ = 0;
  std::string source_;
  cuda::CompileStats before_;
};

TEST_F(CudaBackgroundCompile, ACachedKernelWaitsForTheBackgroundCompileOfItsSource) {
  const std::string arch = ctx_->arch();
  cuda::compile_in_background(source_, "background.cu", arch);
  cuda::compile_in_background(source_, "background.cu", arch);  // queued once
  cudaKernel_t k = cuda::cached_kernel(source_, "background.cu", "k", arch);
  ASSERT_NE(k, nullptr);
  const cuda::CompileStats after = cuda::compile_stats();
  EXPECT_EQ(after.compiles, before_.compiles);  // not on this thread
  EXPECT_EQ(after.background, before_.background + 1);
  EXPECT_EQ(cuda::ready_kernel(source_, "k", arch), k);
  EXPECT_EQ(run(*ctx_, k), value_);
}

TEST_F(CudaBackgroundCompile, AReadyKernelIsFoundOnceItsBackgroundCompileEndsAndNeverCompiled) {
  const std::string arch = ctx_->arch();
  EXPECT_EQ(cuda::ready_kernel(source_, "k", arch), nullptr);
  cuda::CompileStats now = cuda::compile_stats();
  EXPECT_EQ(now.compiles + now.background, before_.compiles + before_.background);
  cuda::compile_in_background(source_, "background.cu", arch);
  cudaKernel_t k = nullptr;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(k = cuda::ready_kernel(source_, "k", arch)) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_NE(k, nullptr) << "the background compile did not end within 60 s";
  now = cuda::compile_stats();
  EXPECT_EQ(now.compiles, before_.compiles);
  EXPECT_EQ(now.background, before_.background + 1);
  EXPECT_EQ(run(*ctx_, k), value_);
}

}  // namespace
