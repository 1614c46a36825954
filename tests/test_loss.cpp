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
