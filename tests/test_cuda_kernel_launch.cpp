// Kernel launches (src/cuda/kernel_launch.hpp): a kernel launched right after itself goes through
// its one-node graph with that launch's own grid and arguments, so a launch that replayed the
// graph's earlier arguments would leave its output poisoned or wrong; any other launch is direct.
// Without a GPU these skip with the reason cuda::absent_reason gives.
#include <cuda_runtime.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "cuda/context.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/kernel_launch.hpp"
#include "require_cuda.hpp"
#include "test_support.hpp"

namespace {

namespace cuda = kiln::cuda;
using kiln::DType;
using kiln::Tensor;

// out = x * a + b (or x * a - b: another kernel), in f32 (two roundings: --fmad=false).
kiln::ir::Program scale_shift(kiln::ir::Op shift = kiln::ir::Op::add) {
  kiln::ir::Program p;
  const std::int32_t x = p.input(DType::f32);
  const std::int32_t scaled = p.binary(kiln::ir::Op::mul, x, p.scalar(DType::f32));
  p.output(p.binary(shift, scaled, p.scalar(DType::f32)));
  return p;
}

// Runs scale_shift over x into a NaN-poisoned output (a new one unless given) and checks every
// element exactly.
void run_and_check(cuda::Context& ctx, const kiln::ir::Program& p, const Tensor<1>& x, float a,
                   float b, kiln::detail::Handle out = nullptr) {
  if (!out) out = cuda::device_empty(ctx, {x.size(0)}, DType::f32);
  ASSERT_EQ(cudaMemsetAsync(out->data(), 0xff, x.size(0) * sizeof(float), ctx.stream), cudaSuccess);
  const kiln::detail::TensorImpl* in[] = {x.handle().get()};
  const kiln::detail::TensorImpl* outs[] = {out.get()};
  const double scalars[] = {a, b};
  cuda::elementwise(ctx, p, in, scalars, outs);
  const bool add = p.nodes.back().op == kiln::ir::Op::add;
  const std::vector<float> xs = x.to_vector<float>();
  std::vector<float> got(xs.size());
  ASSERT_EQ(cudaStreamSynchronize(ctx.stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), out->data(), got.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const float want = static_cast<float>(static_cast<double>(xs[i] * a) + (add ? b : -b));
    ASSERT_EQ(got[i], want) << "element " << i << " of " << xs.size() << ", x " << xs[i];
  }
}

TEST(CudaKernelLaunch, ARepeatedKernelRunsItsGraphWithEachLaunchsGridAndArguments) {
  KILN_REQUIRE_CUDA();
  cuda::Context& ctx = cuda::context(0);
  const kiln::Device dev = kiln::Device::cuda(0);
  std::uint64_t seed = kt::fresh_seed();
  auto random = [&](std::int64_t n) {
    return Tensor<1>::random({n}, kiln::Distribution::uniform(-4, 4), dev, seed++);
  };
  // One kernel for both sizes (contiguous, aligned multiples of 4): 1 block, then 293.
  const Tensor<1> small = random(1000), large = random(300000);
  const kiln::ir::Program p = scale_shift(), other = scale_shift(kiln::ir::Op::sub);
  const cuda::LaunchStats before = cuda::launch_stats();
  run_and_check(ctx, p, small, 2.0f, 1.0f);      // after the random kernel: direct
  run_and_check(ctx, p, large, -3.0f, 0.5f);     // a repeat: captured, then its graph
  run_and_check(ctx, p, small, 0.5f, -1.0f);     // the graph, with the first grid again
  run_and_check(ctx, p, large, 1.5f, 2.0f);      // the graph
  run_and_check(ctx, other, small, 2.0f, 1.0f);  // another kernel: direct
  run_and_check(ctx, p, small, -1.0f, 3.0f);     // not a repeat: direct
  const cuda::LaunchStats after = cuda::launch_stats();
  EXPECT_EQ(after.graph - before.graph, 3);
  EXPECT_EQ(after.unchanged - before.unchanged, 0);
  EXPECT_EQ(after.direct - before.direct, 3);
}

// A repeat with the very arguments the graph's node holds skips the update, and still runs: the
// output is poisoned before each launch.
TEST(CudaKernelLaunch, ARepeatWithTheSameArgumentsRelaunchesTheGraphAsItIs) {
  KILN_REQUIRE_CUDA();
  cuda::Context& ctx = cuda::context(0);
  const kiln::Device dev = kiln::Device::cuda(0);
  const std::uint64_t seed = kt::fresh_seed();
  const Tensor<1> x = Tensor<1>::random({50000}, kiln::Distribution::uniform(-4, 4), dev, seed);
  const kiln::detail::Handle out = cuda::device_empty(ctx, {x.size(0)}, DType::f32);
  const kiln::ir::Program p = scale_shift();
  const cuda::LaunchStats before = cuda::launch_stats();
  run_and_check(ctx, p, x, 2.0f, 1.0f, out);   // direct
  run_and_check(ctx, p, x, 2.0f, 1.0f, out);   // captured: its graph, arguments set
  run_and_check(ctx, p, x, 2.0f, 1.0f, out);   // unchanged
  run_and_check(ctx, p, x, 2.0f, 1.0f, out);   // unchanged
  run_and_check(ctx, p, x, 2.0f, -1.0f, out);  // another scalar: set
  run_and_check(ctx, p, x, 2.0f, -1.0f, out);  // unchanged
  const cuda::LaunchStats after = cuda::launch_stats();
  EXPECT_EQ(after.graph - before.graph, 5);
  EXPECT_EQ(after.unchanged - before.unchanged, 3);
  EXPECT_EQ(after.direct - before.direct, 1);
}

TEST(CudaKernelLaunch, TwoThreadsLaunchingOneKernelEachGetTheirOwnResults) {
  KILN_REQUIRE_CUDA();
  cuda::Context& ctx = cuda::context(0);
  const kiln::Device dev = kiln::Device::cuda(0);
  const std::uint64_t seed = kt::fresh_seed();
  const Tensor<1> xs[] = {
      Tensor<1>::random({4096}, kiln::Distribution::uniform(-1, 1), dev, seed),
      Tensor<1>::random({8192}, kiln::Distribution::uniform(-1, 1), dev, seed + 1)};
  const kiln::ir::Program p = scale_shift();
  auto work = [&](int t) {
    for (int i = 0; i < 20; ++i)
      run_and_check(ctx, p, xs[t], static_cast<float>(t + i), static_cast<float>(i - t));
  };
  std::thread other(work, 1);
  work(0);
  other.join();
}

}  // namespace
