// Losses (kiln/loss.hpp): values and gradients against float64, ignore_index and label
// smoothing as PyTorch's, the error paths.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

class LossTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(LossTest);

TEST_P(LossTest, CrossEntropyWithIgnoreAndSmoothingMatchesFloat64) {
  const int N = 7, C = 5;
  const auto X = kt::uniform(N * C, -3, 3, rng());
  const std::vector<std::int32_t> T = {0, 4, -100, 2, 2, -100, 1};
  auto t = Tensor<1>::from_data(T, {N}, dev());
  for (double s : {0.0, 0.1}) {
    SCOPED_TRACE(s);
    auto x = Tensor<2>::from_data(X, {N, C}, dev()).requires_grad(true);
    auto loss = kiln::cross_entropy(x, t, -100, s);
    loss.backward();
    double want = 0;
    std::vector<double> dx(N * C, 0);
    int kept = 0;
    for (int i = 0; i < N; ++i) kept += T[i] != -100;
    for (int i = 0; i < N; ++i) {
      if (T[i] == -100) continue;
      double m = -1e300, z = 0;
      for (int c = 0; c < C; ++c) m = std::max(m, double(X[i * C + c]));
      for (int c = 0; c < C; ++c) z += std::exp(X[i * C + c] - m);
      double mean_nlp = 0;
      for (int c = 0; c < C; ++c) {
        const double lp = X[i * C + c] - m - std::log(z);
        mean_nlp -= lp / C;
        const double p = std::exp(lp);
        dx[i * C + c] = ((1 - s) * (p - (c == T[i])) + s * (p - 1.0 / C)) / kept;
      }
      want += ((1 - s) * -(X[i * C + T[i]] - m - std::log(z)) + s * mean_nlp) / kept;
    }
    EXPECT_NEAR(loss.item(), want, 1e-5 * (1 + std::fabs(want)));
    const auto got = x.grad()->to_vector();
    for (int k = 0; k < N * C; ++k) ASSERT_NEAR(got[k], dx[k], 2e-6) << k;
  }
}

// The loss and the logits' gradient of cross_entropy as float64 computes them from logits X
// (row-major [N, C]); ignored rows have target -100.
struct CrossEntropyRef {
  double loss = 0;
  std::vector<double> grad;
};
CrossEntropyRef cross_entropy_ref(const std::vector<float>& X, const std::vector<std::int32_t>& T,
                                  int C, double s) {
  const int N = static_cast<int>(T.size());
  CrossEntropyRef r;
  r.grad.assign(X.size(), 0.0);
  int kept = 0;
  for (int i = 0; i < N; ++i) kept += T[i] != -100;
  for (int i = 0; i < N; ++i) {
    if (T[i] == -100) continue;
    double m = -1e300, z = 0, mean_x = 0;
    for (int c = 0; c < C; ++c) m = std::max(m, double(X[i * C + c]));
    for (int c = 0; c < C; ++c) z += std::exp(X[i * C + c] - m), mean_x += X[i * C + c] / C;
    const double lse = m + std::log(z);
    for (int c = 0; c < C; ++c)
      r.grad[i * C + c] = (std::exp(X[i * C + c] - lse) - (1 - s) * (c == T[i]) - s / C) / kept;
    r.loss += (lse - (1 - s) * X[i * C + T[i]] - s * mean_x) / kept;
  }
  return r;
}

// bf16 and f16 logits, also as a transposed view: the loss f32 from the half values (no extra
// rounding), the gradient in the logits' dtype within one rounding of the float64 one.
TEST_P(LossTest, CrossEntropyOfHalfAndStridedLogits) {
  const int N = 33, C = 70;
  const auto T = kt::ints(N, -1, C - 1, rng());
  std::vector<std::int32_t> targets(T);
  for (auto& v : targets) v = v < 0 ? -100 : v;
  const auto t = Tensor<1>::from_data(targets, {N}, dev());
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (bool transposed : {false, true}) {
      SCOPED_TRACE(std::string(kiln::dtype_name(dtype)) + (transposed ? " transposed" : ""));
      const double s = transposed ? 0.2 : 0.0;
      auto leaf =
          (transposed ? Tensor<2>::from_data(kt::uniform(N * C, -6, 6, rng()), {C, N}, dev())
                      : Tensor<2>::from_data(kt::uniform(N * C, -6, 6, rng()), {N, C}, dev()))
              .to(dtype)
              .requires_grad(true);
      const auto x = transposed ? leaf.transpose(0, 1) : leaf;
      const auto X = x.to(DType::f32).contiguous().to_vector();  // the half values, exactly
      auto loss = kiln::cross_entropy(x, t, -100, s);
      EXPECT_EQ(loss.dtype(), DType::f32);
      loss.backward();
      const auto want = cross_entropy_ref(X, targets, C, s);
      EXPECT_NEAR(loss.item(), want.loss, 2e-6 * (1 + std::fabs(want.loss)));
      ASSERT_EQ(leaf.grad()->dtype(), dtype);
      const auto got = (transposed ? leaf.grad()->transpose(0, 1) : *leaf.grad())
                           .to(DType::f32)
                           .contiguous()
                           .to_vector();
      const double ulp = dtype == DType::bf16 ? 0x1p-8 : dtype == DType::f16 ? 0x1p-11 : 0x1p-23;
      for (int k = 0; k < N * C; ++k)
        ASSERT_NEAR(got[k], want.grad[k], ulp * std::fabs(want.grad[k]) + 1e-7) << k;
    }
  }
}

// Fused: neither forward nor backward writes a [N, C] tensor besides the logits' gradient.
TEST_P(LossTest, CrossEntropyWritesNoProbabilities) {
  const int N = 128, C = 2048;
  const long long logits_bytes = 4LL * N * C;
  auto x =
      Tensor<2>::from_data(kt::uniform(N * C, -4, 4, rng()), {N, C}, dev()).requires_grad(true);
  const auto t = Tensor<1>::from_data(kt::ints(N, 0, C - 1, rng()), {N}, dev());
  dev().sync();
  const long long before = kiln::memory_stats().live_bytes;
  kiln::reset_peak_buffers();
  auto loss = kiln::cross_entropy(x, t, -100, 0.1);
  (void)loss.item();
  EXPECT_LT(kiln::memory_stats().peak_bytes - before, logits_bytes / 8) << "forward";
  loss.backward();
  dev().sync();
  EXPECT_LT(kiln::memory_stats().peak_bytes - before, logits_bytes + logits_bytes / 8)
      << "backward: the gradient and per-row vectors only";
}

TEST_P(LossTest, MseAndNll) {
  auto a = Tensor<2>::from_data(kt::uniform(6, -1, 1, rng()), {2, 3}, dev()).requires_grad(true);
  auto b = Tensor<2>::from_data(kt::uniform(6, -1, 1, rng()), {2, 3}, dev());
  auto loss = kiln::mse_loss(a, b);
  loss.backward();
  const auto A = a.to_vector(), B = b.to_vector(), G = a.grad()->to_vector();
  double want = 0;
  for (int i = 0; i < 6; ++i) {
    want += (double(A[i]) - B[i]) * (double(A[i]) - B[i]) / 6;
    EXPECT_NEAR(G[i], 2 * (double(A[i]) - B[i]) / 6, 1e-6);
  }
  EXPECT_NEAR(loss.item(), want, 1e-6);
  auto lp = Tensor<2>::from_data(std::vector<float>{-1, -2, -3, -4}, {2, 2}, dev());
  auto t = Tensor<1>::from_data(std::vector<std::int32_t>{1, 0}, {2}, dev());
  EXPECT_FLOAT_EQ(kiln::nll_loss(lp, t).item(), 2.5f);
  // Every row ignored: 0 / 0, as PyTorch.
  auto none = Tensor<1>::from_data(std::vector<std::int32_t>{-100, -100}, {2}, dev());
  EXPECT_TRUE(std::isnan(kiln::nll_loss(lp, none).item()));
}

TEST_P(LossTest, Errors) {
  auto x = Tensor<2>::zeros({3, 4}, DType::f32, dev());
  auto t = Tensor<1>::from_data(std::vector<std::int32_t>{0, 1, 2}, {3}, dev());
  EXPECT_THROW(kiln::cross_entropy(x, t.to(DType::f32)), kiln::DTypeError);
  EXPECT_THROW(kiln::cross_entropy(x.to(DType::i32), t), kiln::DTypeError);
  EXPECT_THROW(
      kiln::cross_entropy(x, Tensor<1>::from_data(std::vector<std::int32_t>{0, 1}, {2}, dev())),
      kiln::ShapeError);
  EXPECT_THROW(kiln::cross_entropy(x, t, -100, 1.5), kiln::ValueError);
  auto bad = Tensor<1>::from_data(std::vector<std::int32_t>{0, 4, 1}, {3}, dev());
  EXPECT_THROW(kiln::cross_entropy(x, bad).item(), kiln::IndexError);
}

}  // namespace
