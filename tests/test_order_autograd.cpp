// Gradients of the order ops on every device: d sum(op(x) * G) / dx for sort and topk values
// (both directions), max/min_with_indices, and cumsum, along the last dim and dim 0, against
// central differences of the op in float64; indices carry no gradient; a bf16 leaf.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "kiln/kiln.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;
using Rows = std::vector<double>;

class OrderAutogradTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(OrderAutogradTest);

constexpr int R = 3, n = 7;

// The ops in float64 along the last dim of [R, n] row-major: sort (the first k of it: topk) and
// cumsum, each giving R x k.
Rows sorted_first(const Rows& x, int k, bool desc) {
  Rows y;
  for (int r = 0; r < R; ++r) {
    Rows row(x.begin() + r * n, x.begin() + (r + 1) * n);
    std::stable_sort(row.begin(), row.end(),
                     [&](double a, double b) { return desc ? a > b : a < b; });
    y.insert(y.end(), row.begin(), row.begin() + k);
  }
  return y;
}
Rows prefix(const Rows& x) {
  Rows y(x.size());
  for (int r = 0; r < R; ++r) {
    double s = 0;
    for (int j = 0; j < n; ++j) y[r * n + j] = s += x[r * n + j];
  }
  return y;
}

// d sum(f(x) G) / dx by central differences.
Rows numeric(Rows x, const std::vector<float>& G, const std::function<Rows(const Rows&)>& f) {
  Rows d(x.size());
  auto dot = [&](const Rows& y) {
    double s = 0;
    for (std::size_t k = 0; k < y.size(); ++k) s += y[k] * G[k];
    return s;
  };
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double h = 1e-4, keep = x[i];
    x[i] = keep + h;
    const double up = dot(f(x));
    x[i] = keep - h;
    d[i] = (up - dot(f(x))) / (2 * h);
    x[i] = keep;
  }
  return d;
}

TEST_P(OrderAutogradTest, ValuesAndCumsumMatchCentralDifferences) {
  // Distinct values at least 0.05 apart, so the differences never reorder a row.
  std::vector<float> X(R * n);
  for (int r = 0; r < R; ++r) {
    std::vector<int> p(n);
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), rng());
    for (int j = 0; j < n; ++j) X[r * n + j] = static_cast<float>(p[j]) * 0.25f - 0.8f;
  }
  const Rows x0(X.begin(), X.end());
  struct Case {
    const char* name;
    int k;  // output columns
    std::function<Tensor<2>(const Tensor<2>&)> op;
    std::function<Rows(const Rows&)> ref;
  };
  const std::vector<Case> cases = {
      {"sort", n, [](const Tensor<2>& x) { return x.sort(1).values; },
       [](const Rows& v) { return sorted_first(v, n, false); }},
      {"sort descending", n, [](const Tensor<2>& x) { return x.sort(-1, true).values; },
       [](const Rows& v) { return sorted_first(v, n, true); }},
      {"topk 3", 3, [](const Tensor<2>& x) { return x.topk(3).values; },
       [](const Rows& v) { return sorted_first(v, 3, true); }},
      {"topk 2 smallest", 2, [](const Tensor<2>& x) { return x.topk(2, 1, false).values; },
       [](const Rows& v) { return sorted_first(v, 2, false); }},
      {"max", 1, [](const Tensor<2>& x) { return x.max_with_indices(1, kiln::keepdim).values; },
       [](const Rows& v) { return sorted_first(v, 1, true); }},
      {"min", 1, [](const Tensor<2>& x) { return x.min_with_indices(1, kiln::keepdim).values; },
       [](const Rows& v) { return sorted_first(v, 1, false); }},
      {"cumsum", n, [](const Tensor<2>& x) { return x.cumsum(1); }, prefix},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto G = kt::uniform(static_cast<std::size_t>(R * c.k), -1, 1, rng());
    auto x = Tensor<2>::from_data(X, {R, n}, dev()).requires_grad(true);
    const Tensor<2> y = c.op(x);
    (y * Tensor<2>::from_data(G, {R, c.k}, dev())).sum().backward();
    const auto got = x.grad()->to_vector<float>();
    const Rows want = numeric(x0, G, c.ref);
    for (int i = 0; i < R * n; ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << "at " << i;
  }
}

TEST_P(OrderAutogradTest, AlongDimZeroIndicesAndHalfLeaves) {
  // cumsum and sort along dim 0 of the transpose are the last-dim ops' gradients transposed.
  const auto X = kt::uniform(R * n, -1, 1, rng()), G = kt::uniform(R * n, -1, 1, rng());
  auto x = Tensor<2>::from_data(X, {R, n}, dev()).requires_grad(true);
  const auto g = Tensor<2>::from_data(G, {R, n}, dev());
  (x.transpose(0, 1).cumsum(0).transpose(0, 1) * g).sum().backward();
  const auto got = x.grad()->to_vector<float>();
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = j; k < n; ++k) s += G[r * n + k];  // reverse cumsum of the gradient
      ASSERT_NEAR(got[r * n + j], s, 1e-5);
    }
  // Indices are i32: they need no gradient, and using them leaves x's gradient alone.
  auto x2 = Tensor<2>::from_data(X, {R, n}, dev()).requires_grad(true);
  const auto s = x2.sort(1);
  EXPECT_FALSE(s.indices.requires_grad());
  EXPECT_TRUE(s.values.requires_grad());
  EXPECT_FALSE(x2.argsort(1).requires_grad());
  // A bf16 leaf: the gradient of max's value is one at the argmax.
  auto h = Tensor<2>::from_data(X, {R, n}, dev()).to(DType::bf16).detach().requires_grad(true);
  h.max_with_indices(1).values.sum().backward();
  const auto hg = h.grad()->to(DType::f32).to_vector<float>();
  const auto am = h.argmax(1).to_vector<std::int32_t>();
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < n; ++j) ASSERT_EQ(hg[r * n + j], j == am[r] ? 1.0f : 0.0f);
}

}  // namespace
