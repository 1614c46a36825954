// Graph replays of cuBLASLt calls (src/cuda/matmul/graph_replays.hpp, matmul.cpp): a call repeated
// at the same addresses is captured once, on its second sighting, and replayed after that; every
// call, replayed or not, writes its whole output (poisoned with NaN before each) within the
// precision's bound of a float64 reference on fresh random data. Without a GPU these skip with
// the reason cuda::absent_reason gives.
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/context.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/matmul/graph_replays.hpp"
#include "require_cuda.hpp"
#include "test_support.hpp"

namespace {

namespace cuda = kiln::cuda;
using kiln::Precision;
using kiln::Tensor;

// out[0] = a[0] @ b[0] checked element by element: strict fp32 within 2 k 2^-24 sum|a b|, TF32
// within 2^-10 sum|a b| (docs/accuracy.md), each doubled.
void expect_product(const Tensor<3>& a, const Tensor<3>& b, const std::vector<float>& got,
                    Precision precision, int call) {
  const std::int64_t m = a.size(1), k = a.size(2), n = b.size(2);
  const std::vector<float> x = a.contiguous().to_vector<float>(),
                           y = b.contiguous().to_vector<float>();
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double want = 0, mag = 0;
      for (std::int64_t q = 0; q < k; ++q) {
        want += double(x[i * k + q]) * y[q * n + j];
        mag += std::abs(double(x[i * k + q]) * y[q * n + j]);
      }
      const double bound = precision == Precision::high ? 2 * std::ldexp(mag, -10)
                                                        : 2 * 2 * double(k) * std::ldexp(mag, -24);
      ASSERT_LE(std::abs(got[i * n + j] - want), bound + 1e-30)
          << "call " << call << ", element " << i << ", " << j;
    }
}

TEST(CudaMatmulGraphs, ARepeatedCallIsCapturedOnceThenReplayedAndStaysRight) {
  KILN_REQUIRE_CUDA();
  const kiln::Device dev = kiln::Device::cuda(0);
  cuda::Context& ctx = cuda::context(0);
  const Precision saved = kiln::float32_matmul_precision();
  // The heuristic's first choice, always a cuBLASLt algorithm (the tuner may pick kiln's own
  // kernel for a problem this small, which has no graph to replay).
  const kiln::Config config = kiln::config();
  kiln::Config untuned = config;
  untuned.autotune = false;
  kiln::set_config(untuned);
  std::uint64_t seed = kt::fresh_seed();
  auto random = [&](std::int64_t r, std::int64_t c) {
    return Tensor<3>::random({1, r, c}, kiln::Distribution::uniform(-1, 1), dev, seed++);
  };
  for (const Precision precision : {Precision::highest, Precision::high}) {
    kiln::set_float32_matmul_precision(precision);
    // A plain pair and one whose a is a transposed view (another plan: op T).
    const Tensor<3> a_plain = random(96, 80), a_viewed = random(80, 96).transpose(1, 2);
    for (const Tensor<3>& a : {a_plain, a_viewed}) {
      SCOPED_TRACE(std::string(precision == Precision::high ? "high" : "highest") +
                   (a.is_contiguous() ? ", a contiguous" : ", a transposed"));
      const Tensor<3> b = random(80, 72), out = random(96, 72);  // (random binds memory at once)
      const cuda::GraphStats before = cuda::graph_stats();
      for (int call = 1; call <= 4; ++call) {
        ASSERT_EQ(
            cudaMemsetAsync(out.handle()->data(), 0xff, out.numel() * sizeof(float), ctx.stream),
            cudaSuccess);
        cuda::matmul(ctx, *a.handle(), *b.handle(), *out.handle());
        expect_product(a, b, out.to_vector<float>(), precision, call);
      }
      const cuda::GraphStats after = cuda::graph_stats();
      EXPECT_EQ(after.captures - before.captures, 1) << "captured at the second call";
      EXPECT_EQ(after.replays - before.replays, 3) << "calls 2, 3 and 4 replayed";
    }
  }
  kiln::set_float32_matmul_precision(saved);
  kiln::set_config(config);
}

}  // namespace
