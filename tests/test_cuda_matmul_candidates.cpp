// Every candidate the matmul tuner times on CUDA (src/cuda/matmul/matmul.cpp: the cuBLASLt
// heuristic's algorithms and kiln's own kernels), each against a float64 reference on fresh random
// data, for square, skinny, batched (one side broadcast) and transposed problems under both
// precisions. The output is poisoned with NaN before every candidate, so an element a candidate
// never writes fails. The bound per element is the one of tools/kiln/bench.cpp: 2 k 2^-24 sum|a b|
// for strict fp32, 2^-10 sum|a b| relative under TF32 (docs/accuracy.md), each doubled.
// Without a GPU these skip with the reason kiln::devices() gives.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "cuda/context.hpp"
#include "cuda/cuda_ops.hpp"
#include "test_support.hpp"

#if KILN_WITH_AUTOTUNE  // (the candidates are the tuner's)
namespace {

using kiln::Device;
using kiln::Precision;
using kiln::Shape;
using kiln::Tensor;

std::optional<Device> cuda_device(std::string& why) {
  why = "kiln::devices() lists no CUDA device";
  for (const auto& d : kiln::devices()) {
    if (d.present && d.name == "cuda:0") return Device::cuda(0);
    if (!d.present && d.name.rfind("cuda", 0) == 0) why = d.name + ": " + d.reason;
  }
  return std::nullopt;
}

struct Case {
  std::string name;
  Tensor<3> a, b;  // [B, m, k] and [B, k, n], any views
};

// out = a @ b by every candidate, each compared with float64 over every element.
void check_every_candidate(const Case& c, Precision precision) {
  SCOPED_TRACE(c.name + (precision == Precision::high ? " (high)" : " (highest)"));
  const Precision saved = kiln::float32_matmul_precision();
  kiln::set_float32_matmul_precision(precision);
  const std::int64_t batch = std::max(c.a.size(0), c.b.size(0)), m = c.a.size(1), k = c.a.size(2),
                     n = c.b.size(2);
  const std::vector<float> a = c.a.contiguous().to_vector<float>(),
                           b = c.b.contiguous().to_vector<float>();
  const bool a_bcast = c.a.size(0) == 1, b_bcast = c.b.size(0) == 1;
  std::vector<double> want(static_cast<std::size_t>(batch * m * n)), mag(want.size());
  for (std::int64_t p = 0; p < batch; ++p)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0, t = 0;
        for (std::int64_t q = 0; q < k; ++q) {
          const double x = a[((a_bcast ? 0 : p) * m + i) * k + q];
          const double y = b[((b_bcast ? 0 : p) * k + q) * n + j];
          s += x * y;
          t += std::fabs(x * y);
        }
        want[(p * m + i) * n + j] = s;
        mag[(p * m + i) * n + j] = t;
      }
  const double gamma = precision == Precision::high ? 2 * 0x1p-10 + 2 * k * 0x1p-24
                                                    : 2 * static_cast<double>(k) * 0x1p-24;

  // The output: bound to memory (random binds at once, also on a fused device), then poisoned.
  const auto out =
      Tensor<3>::random({batch, m, n}, kiln::Distribution::uniform(0, 1), c.a.device(), 7);
  out.device().sync();
  auto& ctx = kiln::cuda::context(c.a.device().index());
  const auto& o = *out.handle();
  auto poison = [&] {
    ASSERT_EQ(cudaMemsetAsync(o.data(), 0xff, o.numel() * sizeof(float), ctx.stream), cudaSuccess);
  };
  poison();
  std::set<std::string> seen;
  kiln::cuda::for_each_matmul_candidate(
      ctx, *c.a.handle(), *c.b.handle(), o, [&](const std::string& name) {
        seen.insert(name);
        std::vector<float> got(want.size());
        ASSERT_EQ(cudaMemcpy(got.data(), o.data(), got.size() * sizeof(float), cudaMemcpyDefault),
                  cudaSuccess);
        std::size_t bad = 0, worst = 0;
        double worst_ratio = 0;
        for (std::size_t e = 0; e < got.size(); ++e) {
          const double err = std::fabs(got[e] - want[e]), bound = gamma * mag[e] + 1e-30;
          if (!(err <= bound)) ++bad;
          const double ratio = std::isnan(err) ? INFINITY : err / bound;
          if (ratio >= worst_ratio) worst_ratio = ratio, worst = e;
        }
        EXPECT_EQ(bad, 0u) << name << ": " << bad << " of " << got.size()
                           << " elements beyond the bound; worst element " << worst << " is "
                           << got[worst] << ", float64 " << want[worst] << ", bound "
                           << gamma * mag[worst];
        poison();
      });
  EXPECT_GE(seen.size(), 2u) << "fewer candidates than expected";
  EXPECT_TRUE(seen.count("kiln gemm fp32")) << "kiln's own fp32 kernel did not run";
  kiln::set_float32_matmul_precision(saved);
}

class CudaMatmulCandidates : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    dev_ = cuda_device(why);
    if (!dev_) GTEST_SKIP() << why;
    seed_ = kt::fresh_seed();
  }
  Tensor<3> rand(std::int64_t b, std::int64_t r, std::int64_t c) {
    return Tensor<3>::random({b, r, c}, kiln::Distribution::uniform(-1, 1), *dev_, seed_++);
  }
  std::optional<Device> dev_;
  std::uint64_t seed_ = 0;
};

TEST_F(CudaMatmulCandidates, Square) {
  const Case c{"square 512", rand(1, 512, 512), rand(1, 512, 512)};
  check_every_candidate(c, Precision::highest);
  check_every_candidate(c, Precision::high);
}

TEST_F(CudaMatmulCandidates, Skinny) {
  check_every_candidate({"1 x 1000 x 4096", rand(1, 1, 1000), rand(1, 1000, 4096)},
                        Precision::highest);
  check_every_candidate({"4097 x 17 x 3", rand(1, 4097, 17), rand(1, 17, 3)}, Precision::highest);
}

TEST_F(CudaMatmulCandidates, BatchedWithABroadcastSide) {
  const Case c{"batch 3, b broadcast", rand(3, 64, 96),
               rand(1, 96, 80).expand(Shape<3>{3, 96, 80})};
  check_every_candidate(c, Precision::highest);
  check_every_candidate(c, Precision::high);
}

TEST_F(CudaMatmulCandidates, TransposedViews) {
  check_every_candidate({"a transposed", rand(1, 200, 300).transpose(1, 2), rand(1, 200, 150)},
                        Precision::highest);
  check_every_candidate({"b transposed", rand(1, 130, 70), rand(1, 90, 70).transpose(1, 2)},
                        Precision::highest);
}

}  // namespace
#endif
