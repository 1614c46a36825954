// Autodiff on every device: gradients of models and of each recorded call against float64
// gradients written out by hand, on fresh random inputs; views and broadcasting; accumulation,
// retain_graph, NoGradGuard, detach; the error paths; a 100,000-op chain freed without recursion.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kiln/kiln.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

class AutogradTest : public kt::DeviceTest {
 protected:
  template <std::size_t D>
  Tensor<D> leaf(const kiln::Shape<D>& shape, double lo = -1, double hi = 1) {
    std::int64_t n = 1;
    for (auto e : shape) n *= e;
    return Tensor<D>::from_data(kt::uniform(n, lo, hi, rng()), shape, dev()).requires_grad(true);
  }
};
KILN_INSTANTIATE_DEVICES(AutogradTest);

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want,
                     const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << what << " at " << i;
}

// loss = mean over rows of sum((tanh(x W1 + b1) W2 - t)^2): every gradient against the chain
// rule written out in float64.
TEST_P(AutogradTest, TwoLayerNetworkMatchesFloat64) {
  const int B = 9, I = 7, H = 6, O = 3;
  auto x = Tensor<2>::from_data(kt::uniform(B * I, -1, 1, rng()), {B, I}, dev());
  auto t = Tensor<2>::from_data(kt::uniform(B * O, -1, 1, rng()), {B, O}, dev());
  auto w1 = leaf<2>({I, H}), w2 = leaf<2>({H, O});
  auto b1 = leaf<1>({H});
  auto out = kiln::matmul((kiln::matmul(x, w1) + b1).tanh(), w2);
  auto loss = ((out - t) * (out - t)).sum(1).mean();
  loss.backward();

  const auto X = x.to_vector(), T = t.to_vector(), W1 = w1.to_vector(), B1 = b1.to_vector(),
             W2 = w2.to_vector();
  std::vector<double> h(B * H), dz(B * H), dw1(I * H, 0), db1(H, 0), dw2(H * O, 0);
  for (int r = 0; r < B; ++r)
    for (int j = 0; j < H; ++j) {
      double z = B1[j];
      for (int k = 0; k < I; ++k) z += double(X[r * I + k]) * W1[k * H + j];
      h[r * H + j] = std::tanh(z);
    }
  for (int r = 0; r < B; ++r) {
    for (int o = 0; o < O; ++o) {
      double y = 0;
      for (int j = 0; j < H; ++j) y += h[r * H + j] * W2[j * O + o];
      const double dy = 2 * (y - T[r * O + o]) / B;
      for (int j = 0; j < H; ++j) {
        dw2[j * O + o] += h[r * H + j] * dy;
        dz[r * H + j] += dy * W2[j * O + o] * (1 - h[r * H + j] * h[r * H + j]);
      }
    }
  }
  for (int r = 0; r < B; ++r)
    for (int j = 0; j < H; ++j) {
      db1[j] += dz[r * H + j];
      for (int k = 0; k < I; ++k) dw1[k * H + j] += X[r * I + k] * dz[r * H + j];
    }
  expect_near_all(w1.grad()->to_vector(), dw1, "dW1");
  expect_near_all(b1.grad()->to_vector(), db1, "db1 (summed over the broadcast rows)");
  expect_near_all(w2.grad()->to_vector(), dw2, "dW2");
}

// Views: a transpose, a strided slice and a broadcast of one leaf, each read by a different op.
TEST_P(AutogradTest, ViewsScatterTheirGradientsBack) {
  auto x = leaf<2>({3, 4});
  auto w = Tensor<2>::from_data(kt::uniform(4, -1, 1, rng()), {4, 1}, dev());
  auto a = (x.transpose(0, 1) * w).sum();            // d/dx[i][j] = w[j]
  auto s = x.slice(1, 0, 4, 2);                      // columns 0 and 2
  auto b = (s * s).sum();                            // 2 x there
  auto c = (x.slice(0, 1, 2).expand({5, 4})).sum();  // row 1, read 5 times
  (a + b + c).backward();
  const auto X = x.to_vector(), W = w.to_vector();
  std::vector<double> want(12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      want[i * 4 + j] = W[j] + (j % 2 == 0 ? 2.0 * X[i * 4 + j] : 0) + (i == 1 ? 5 : 0);
  expect_near_all(x.grad()->to_vector(), want, "dx");
}

// Gradients of views that each cover part of a buffer add up in place into its gradient, but a
// gradient someone holds is never changed: accumulating again makes a new one.
TEST_P(AutogradTest, PartialViewGradientsAddUpAndLeaveHeldGradientsAlone) {
  auto x = leaf<2>({3, 4});
  auto loss = [&] {  // the three rows as separate slices, and the middle column pair
    return x.slice(0, 0, 1).sum() + (x.slice(0, 1, 2) * 2.0f).sum() +
           (x.slice(0, 2, 3) * 3.0f).sum() + x.slice(1, 1, 3).sum();
  };
  loss().backward();
  const Tensor<2> held = *x.grad();
  const std::vector<float> first = held.to_vector();
  std::vector<double> want(12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) want[i * 4 + j] = (i + 1) + (j == 1 || j == 2 ? 1 : 0);
  expect_near_all(first, want, "dx");
  loss().backward();  // accumulates into x.grad()
  for (double& w : want) w *= 2;
  expect_near_all(x.grad()->to_vector(), want, "dx after two backward passes");
  EXPECT_EQ(held.to_vector(), first) << "a held gradient changed";
}

// sum, mean, max (ties share the gradient, as PyTorch's amax) over a dim and over everything.
TEST_P(AutogradTest, Reductions) {
  auto x = Tensor<2>::from_data(std::vector<float>{1, 5, 5, 2, -3, 0}, {2, 3}, dev())
               .requires_grad(true);
  (x.max(1).sum() + x.mean() * 6.0f + x.min()).backward();
  expect_near_all(x.grad()->to_vector(), {1, 1.5, 1.5, 2, 2, 1}, "dx");
}

TEST_P(AutogradTest, GradientsAccumulateUntilZeroed) {
  auto x = leaf<1>({5});
  (x * 3.0f).sum().backward();
  (x * x).sum().backward();
  const auto X = x.to_vector();
  std::vector<double> want(5);
  for (int i = 0; i < 5; ++i) want[i] = 3 + 2.0 * X[i];
  expect_near_all(x.grad()->to_vector(), want, "after two backward calls");
  x.zero_grad();
  EXPECT_FALSE(x.grad().has_value());
}

TEST_P(AutogradTest, RetainGraphAndItsError) {
  auto x = leaf<1>({4});
  auto y = (x.exp() * x).sum();
  y.backward(true);
  y.backward();
  const auto X = x.to_vector();
  std::vector<double> want(4);
  for (int i = 0; i < 4; ++i) want[i] = 2 * std::exp(double(X[i])) * (1 + X[i]);
  expect_near_all(x.grad()->to_vector(), want, "twice through a retained graph");
  try {
    y.backward();
    FAIL() << "a third backward ran through freed saved tensors";
  } catch (const kiln::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
}

TEST_P(AutogradTest, NoGradGuardAndDetachRecordNothing) {
  auto x = leaf<1>({3});
  {
    kiln::NoGradGuard guard;
    EXPECT_FALSE(kiln::grad_enabled());
    EXPECT_FALSE((x * 2.0f).requires_grad());
  }
  EXPECT_TRUE(kiln::grad_enabled());
  EXPECT_TRUE((x * 2.0f).requires_grad());
  auto d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.to_vector(), x.to_vector());
  // Only x's direct use takes a gradient: through d none flows.
  (x * d).sum().backward();
  expect_near_all(x.grad()->to_vector(),
                  {double(d.to_vector()[0]), double(d.to_vector()[1]), double(d.to_vector()[2])},
                  "dx");
}

// Batched matmul with a broadcast batch: the shared operand's gradient sums over the batch.
TEST_P(AutogradTest, BatchedMatmulSumsOverABroadcastBatch) {
  auto a = leaf<3>({2, 3, 4});
  auto c = leaf<2>({4, 5});
  kiln::matmul(a, c).sum().backward();
  const auto A = a.to_vector(), C = c.to_vector();
  std::vector<double> da(24), dc(20, 0);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 4; ++k) {
        double s = 0;
        for (int j = 0; j < 5; ++j) s += C[k * 5 + j];
        da[(b * 3 + i) * 4 + k] = s;
        for (int j = 0; j < 5; ++j) dc[k * 5 + j] += A[(b * 3 + i) * 4 + k];
      }
  expect_near_all(a.grad()->to_vector(), da, "da");
  expect_near_all(c.grad()->to_vector(), dc, "dc (summed over the batch)");
}

// x @ W^T with W [n, k] shared by the batch, as Linear computes it: W's gradient is one product
// over every row of the batch, written in W's own layout, and a second backward adds to it.
TEST_P(AutogradTest, TransposedSharedWeightGetsOneProductInItsLayout) {
  const int B = 3, m = 4, k = 5, n = 6;
  auto x = leaf<3>({B, m, k});
  auto w = leaf<2>({n, k});
  const auto r_data = kt::uniform(B * m * n, -1, 1, rng());
  const auto r = Tensor<3>::from_data(r_data, {B, m, n}, dev());
  for (int pass = 1; pass <= 2; ++pass) {
    (kiln::matmul(x, w.transpose(0, 1)) * r).sum().backward();
    const auto X = x.to_vector(), W = w.to_vector();
    std::vector<double> dx(B * m * k, 0), dw(n * k, 0);
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          const double g = pass * double{r_data[(b * m + i) * n + j]};
          for (int c = 0; c < k; ++c) {
            dx[(b * m + i) * k + c] += g * W[j * k + c];
            dw[j * k + c] += g * X[(b * m + i) * k + c];
          }
        }
    expect_near_all(x.grad()->to_vector(), dx, "dx");
    expect_near_all(w.grad()->to_vector(), dw, "dW (one product over the batch)");
  }
}

// A broadcast operand's gradient sums over its broadcast dims: adjacent ones at once (a bias
// over [B, T, N]) and apart ones (a [1, T, 1] over the same), against float64 sums.
TEST_P(AutogradTest, BroadcastGradientsSumOverAdjacentAndApartDims) {
  auto x = leaf<3>({3, 5, 4});
  auto bias = leaf<1>({4});
  auto mid = leaf<3>({1, 5, 1});
  const auto w = Tensor<3>::from_data(kt::uniform(60, -1, 1, rng()), {3, 5, 4}, dev());
  (((x + bias) * mid) * w).sum().backward();
  const auto X = x.to_vector(), B = bias.to_vector(), M = mid.to_vector(), W = w.to_vector();
  std::vector<double> db(4, 0), dm(5, 0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 4; ++k) {
        const int e = (i * 5 + j) * 4 + k;
        db[k] += static_cast<double>(M[j]) * W[e];
        dm[j] += (static_cast<double>(X[e]) + B[k]) * W[e];
      }
  expect_near_all(bias.grad()->to_vector(), db, "bias (dims 0 and 1 at once)");
  expect_near_all(mid.grad()->to_vector(), dm, "mid (dims 0 and 2)");
}

// embedding (index_select) and gather take their gradients back by scatter-add: repeated ids
// add up.
TEST_P(AutogradTest, EmbeddingAndGatherScatterAdd) {
  auto w = leaf<2>({4, 3});
  auto ids = Tensor<1>::from_data(std::vector<std::int32_t>{2, 0, 2, 2}, {4}, dev());
  auto g = Tensor<2>::from_data(kt::uniform(12, -1, 1, rng()), {4, 3}, dev());
  (kiln::embedding(w, ids) * g).sum().backward();
  const auto G = g.to_vector();
  std::vector<double> want(12, 0);
  const int id[] = {2, 0, 2, 2};
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 3; ++j) want[id[r] * 3 + j] += G[r * 3 + j];
  expect_near_all(w.grad()->to_vector(), want, "dW");

  auto x = leaf<2>({2, 3});
  auto idx = Tensor<2>::from_data(std::vector<std::int32_t>{1, 1, 0, 2}, {2, 2}, dev());
  x.gather(1, idx).sum().backward();
  expect_near_all(x.grad()->to_vector(), {0, 2, 0, 1, 0, 1}, "dx of gather");
}

// cat writes one buffer in parts: each part's gradient goes back to its input.
TEST_P(AutogradTest, CatSplitsTheGradient) {
  auto a = leaf<2>({2, 2});
  auto b = leaf<2>({2, 3});
  auto w = Tensor<2>::from_data(kt::uniform(10, -1, 1, rng()), {2, 5}, dev());
  (kiln::cat({a, b}, 1) * w).sum().backward();
  const auto W = w.to_vector();
  expect_near_all(a.grad()->to_vector(), {W[0], W[1], W[5], W[6]}, "da");
  expect_near_all(b.grad()->to_vector(), {W[2], W[3], W[4], W[7], W[8], W[9]}, "db");
}

// A leaf's hook runs once per backward, with the final gradient, before backward returns; a leaf
// read early in forward is final late in backward, and the order follows.
TEST_P(AutogradTest, GradFinalHooks) {
  auto a = leaf<1>({3});
  auto b = leaf<1>({3});
  std::vector<std::string> calls;
  std::vector<float> seen;
  a.on_grad_final([&](const Tensor<1>& g) {
    calls.push_back("a");
    seen = g.to_vector();
  });
  b.on_grad_final([&](const Tensor<1>&) { calls.push_back("b"); });
  auto h = (a * 2.0f).exp();             // a is read first...
  ((h * b).sum() + a.sum()).backward();  // ...and read again last: final after b
  EXPECT_EQ(calls, (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(seen, a.grad()->to_vector());
  (a * b).sum().backward();
  EXPECT_EQ(calls.size(), 4u);
  auto y = a * 2.0f;
  EXPECT_THROW(y.on_grad_final([](const Tensor<1>&) {}), kiln::ValueError);
}

// A bf16 leaf: its gradient is bf16, computed in f32 inside each program and rounded once per
// stored gradient; casts pass the gradient through in both directions.
TEST_P(AutogradTest, HalfLeavesGetHalfGradients) {
  auto x = Tensor<1>::from_data(kt::uniform(8, -1, 1, rng()), {8}, dev())
               .to(DType::bf16)
               .requires_grad(true);
  auto w = Tensor<1>::from_data(kt::uniform(8, -1, 1, rng()), {8}, dev());
  ((x.sin() * x.to(DType::f32)).to(DType::bf16).to(DType::f32) * w).sum().backward();
  ASSERT_EQ(x.grad()->dtype(), DType::bf16);
  const auto X = x.to_vector(), W = w.to_vector(), G = x.grad()->to_vector();
  for (int i = 0; i < 8; ++i) {
    // As PyTorch computes it: the gradient reaching the bf16 value is w rounded to bf16 (the
    // cast's backward), and x.to(f32)'s factor is sin(x) as stored, in bf16.
    const double w_bf16 = kt::round_to_half(W[i], DType::bf16);
    const double sin_bf16 = kt::round_to_half(std::sin(double(X[i])), DType::bf16);
    const double want = w_bf16 * (std::cos(double(X[i])) * X[i] + sin_bf16);
    EXPECT_NEAR(G[i], want, 2 * kt::half_ulp(want, DType::bf16) + 1e-6) << i;
  }
}

// kiln::grad: gradients returned, grad() untouched, of a leaf and of a non-leaf on its path; an
// input nothing reaches gets zeros.
TEST_P(AutogradTest, GradReturnsGradientsWithoutTouchingGrad) {
  auto x = leaf<1>({4});
  auto unused = leaf<1>({4});
  auto h = x.exp();
  auto y = (h * h).sum();
  const auto g = kiln::grad(y, std::vector<Tensor<1>>{x, h, unused}, true);
  EXPECT_FALSE(x.grad().has_value());
  const auto X = x.to_vector(), H = h.to_vector();
  std::vector<double> dx(4), dh(4);
  for (int i = 0; i < 4; ++i) {
    dh[i] = 2.0 * H[i];
    dx[i] = 2.0 * std::exp(2.0 * X[i]);
  }
  expect_near_all(g[0].to_vector(), dx, "dy/dx");
  expect_near_all(g[1].to_vector(), dh, "dy/dh");
  expect_near_all(g[2].to_vector(), {0, 0, 0, 0}, "unused");
  y.backward();  // the graph was retained
  expect_near_all(x.grad()->to_vector(), dx, "backward after grad");
  EXPECT_THROW(kiln::grad(h, std::vector<Tensor<1>>{x}), kiln::ShapeError);
}

// softmax, log_softmax (last dim and another), layer_norm and rms_norm with weight and bias:
// d/d(every input) of sum(op(...) * G) against central differences of the op in float64.
TEST_P(AutogradTest, RowOpsMatchCentralDifferences) {
  const int R = 3, n = 6;
  using Rows = std::vector<double>;
  // The ops in float64 over [R, n] row-major; dim 0 is the softmax over the other dim.
  auto softmax = [&](const Rows& x, bool log, bool over_rows) {
    Rows y(R * n);
    const int outer = over_rows ? n : R, len = over_rows ? R : n;
    for (int o = 0; o < outer; ++o) {
      auto at = [&](int j) { return over_rows ? j * n + o : o * n + j; };
      double m = -1e300, s = 0;
      for (int j = 0; j < len; ++j) m = std::max(m, x[at(j)]);
      for (int j = 0; j < len; ++j) s += std::exp(x[at(j)] - m);
      for (int j = 0; j < len; ++j)
        y[at(j)] = log ? x[at(j)] - m - std::log(s) : std::exp(x[at(j)] - m) / s;
    }
    return y;
  };
  auto norm = [&](const Rows& x, const Rows& w, const Rows& b, bool layer) {
    Rows y(R * n);
    for (int r = 0; r < R; ++r) {
      double mean = 0, var = 0;
      for (int j = 0; j < n; ++j) mean += x[r * n + j] / n;
      if (!layer) mean = 0;
      for (int j = 0; j < n; ++j) var += (x[r * n + j] - mean) * (x[r * n + j] - mean) / n;
      const double rstd = 1 / std::sqrt(var + 1e-5);
      for (int j = 0; j < n; ++j)
        y[r * n + j] = (x[r * n + j] - mean) * rstd * w[j] + (layer ? b[j] : 0);
    }
    return y;
  };
  const auto X = kt::uniform(R * n, -2, 2, rng()), G = kt::uniform(R * n, -1, 1, rng()),
             Wv = kt::uniform(n, 0.5, 1.5, rng()), Bv = kt::uniform(n, -1, 1, rng());
  const Rows x0(X.begin(), X.end()), w0(Wv.begin(), Wv.end()), b0(Bv.begin(), Bv.end());
  auto g = Tensor<2>::from_data(G, {R, n}, dev());
  // d sum(f(v) G) / dv by central differences, for one of the op's inputs v.
  auto numeric = [&](Rows v, const std::function<Rows(const Rows&)>& f) {
    Rows d(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double h = 1e-6, keep = v[i];
      auto dot = [&](const Rows& y) {
        double s = 0;
        for (int k = 0; k < R * n; ++k) s += y[k] * G[k];
        return s;
      };
      v[i] = keep + h;
      const double up = dot(f(v));
      v[i] = keep - h;
      d[i] = (up - dot(f(v))) / (2 * h);
      v[i] = keep;
    }
    return d;
  };
  for (int k = 0; k < 5; ++k) {
    SCOPED_TRACE(k);
    auto x = Tensor<2>::from_data(X, {R, n}, dev()).requires_grad(true);
    auto w = Tensor<1>::from_data(Wv, {n}, dev()).requires_grad(true);
    auto b = Tensor<1>::from_data(Bv, {n}, dev()).requires_grad(true);
    Tensor<2> y;
    std::function<Rows(const Rows&)> fx;
    if (k < 3) {
      const bool log = k == 1, over_rows = k == 2;
      y = log ? x.log_softmax(1) : x.softmax(over_rows ? 0 : 1);
      fx = [&, log, over_rows](const Rows& v) { return softmax(v, log, over_rows); };
    } else {
      const bool layer = k == 3;
      y = layer ? kiln::layer_norm(x, w, b) : kiln::rms_norm(x, w, 1e-5);
      fx = [&, layer](const Rows& v) { return norm(v, w0, b0, layer); };
      (y * g).sum().backward();
      expect_near_all(w.grad()->to_vector(),
                      numeric(w0, [&, layer](const Rows& v) { return norm(x0, v, b0, layer); }),
                      "dw");
      if (layer)
        expect_near_all(b.grad()->to_vector(),
                        numeric(b0, [&](const Rows& v) { return norm(x0, w0, v, true); }), "db");
      expect_near_all(x.grad()->to_vector(), numeric(x0, fx), "dx");
      continue;
    }
    (y * g).sum().backward();
    expect_near_all(x.grad()->to_vector(), numeric(x0, fx), "dx");
  }
}

// checkpoint: the same gradients as the region run plainly, for its input and for a weight it
// captures; the region runs twice (once forward, once in backward).
TEST_P(AutogradTest, CheckpointRecomputesInBackward) {
  auto x = leaf<2>({4, 3});
  auto w = leaf<2>({3, 5});
  int runs = 0;
  std::function<Tensor<2>(const std::vector<Tensor<2>>&)> block =
      [&](const std::vector<Tensor<2>>& in) {
        ++runs;
        return (kiln::matmul(in[0], w).tanh() * in[0].sum(1, kiln::KeepDim{})).exp();
      };
  block({x}).sum().backward();
  const auto dx = x.grad()->to_vector(), dw = w.grad()->to_vector();
  x.zero_grad();
  w.zero_grad();
  runs = 0;
  auto y = kiln::checkpoint(block, std::vector<Tensor<2>>{x});
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(runs, 1);
  y.sum().backward();
  EXPECT_EQ(runs, 2);
  expect_near_all(x.grad()->to_vector(), std::vector<double>(dx.begin(), dx.end()), "dx");
  expect_near_all(w.grad()->to_vector(), std::vector<double>(dw.begin(), dw.end()), "dw");
}

// A gradient passed on unchanged (cat's parts, a sum's addends) shares its source's buffer, at an
// offset for the second part of a cat: every reader (a node's gradient, a leaf's grad, a hook)
// must see it there. d/da of sum(cat(a, a b) w) = w0 + b w1, d/db = a w1.
TEST_P(AutogradTest, GradientsPassedOnKeepTheirOffset) {
  const int n = 6;
  auto a = leaf<1>({n}, -1, 1), b = leaf<1>({n}, -1, 1);
  const auto w_data = kt::uniform(2 * n, -1, 1, rng());
  auto w = Tensor<1>::from_data(w_data, {2 * n}, dev());
  std::vector<float> hooked;
  b.on_grad_final([&](const Tensor<1>& g) { hooked = g.to_vector(); });
  (kiln::cat({a, a * b}, 0) * w).sum().backward();
  const auto av = a.to_vector(), bv = b.to_vector();
  std::vector<double> da(n), db(n);
  for (int i = 0; i < n; ++i) {
    da[i] = w_data[i] + double{bv[i]} * w_data[n + i];
    db[i] = double{av[i]} * w_data[n + i];
  }
  expect_near_all(a.grad()->to_vector(), da, "da");
  expect_near_all(b.grad()->to_vector(), db, "db");
  expect_near_all(hooked, db, "db in the hook");
}

// set_grad (PyTorch's `t.grad = g`) replaces a leaf's gradient: kept as it is where its layout is
// the leaf's (no copy), written in place of the leaf's layout otherwise (a transposed view), and
// only over a partial view's own elements; later backward passes add to it; no hook runs.
TEST_P(AutogradTest, SetGradReplacesTheGradient) {
  auto x = leaf<2>({2, 3});
  int hooks = 0;
  x.on_grad_final([&](const Tensor<2>&) { ++hooks; });
  const std::vector<float> gv{1, 2, 3, 4, 5, 6};
  auto g = Tensor<2>::from_data(gv, {2, 3}, dev());
  (x * 5.0f).sum().backward();  // a gradient there already: replaced, not added to
  EXPECT_EQ(hooks, 1);
  x.set_grad(g);
  EXPECT_EQ(hooks, 1) << "set_grad ran a hook";
  EXPECT_EQ(x.grad()->to_vector(), gv);
  EXPECT_TRUE(kt::shares_buffer(*x.grad(), g)) << "a gradient of the leaf's layout was copied";
  (x * 2.0f).sum().backward();
  EXPECT_EQ(x.grad()->to_vector(), (std::vector<float>{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(g.to_vector(), gv) << "backward wrote into the tensor given to set_grad";

  // A slice of a bigger tensor (at an offset), as data-parallel buckets give.
  auto big = Tensor<1>::from_data(std::vector<float>{9, 9, 1, 2, 3, 4, 5, 6}, {8}, dev());
  x.set_grad(big.slice(0, 2, 8).reshape({2, 3}));
  EXPECT_EQ(x.grad()->to_vector(), gv);

  // A transposed view of the leaf, given a contiguous gradient.
  auto xt = x.transpose(0, 1);
  xt.set_grad(Tensor<2>::from_data(std::vector<float>{1, 4, 2, 5, 3, 6}, {3, 2}, dev()));
  EXPECT_EQ(x.grad()->to_vector(), gv);
  EXPECT_EQ(xt.grad()->to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));

  // A partial view: the other elements keep theirs.
  x.slice(0, 1, 2).set_grad(Tensor<2>::full({1, 3}, -1.0f, DType::f32, dev()));
  EXPECT_EQ(x.grad()->to_vector(), (std::vector<float>{1, 2, 3, -1, -1, -1}));
  x.zero_grad();
  x.slice(1, 0, 1).set_grad(Tensor<2>::full({2, 1}, 7.0f, DType::f32, dev()));
  EXPECT_EQ(x.grad()->to_vector(), (std::vector<float>{7, 0, 0, 7, 0, 0}));

  // A gradient that needs a gradient itself is detached: the leaf's grad records nothing.
  auto w = leaf<2>({2, 3});
  x.set_grad(w);
  EXPECT_FALSE(x.grad()->requires_grad());
  EXPECT_EQ(x.grad()->to_vector(), w.to_vector());

  // A bf16 leaf takes a bf16 gradient.
  auto h = leaf<1>({4}).to(DType::bf16).detach().requires_grad(true);
  h.set_grad(Tensor<1>::full({4}, 0.5f, DType::bf16, dev()));
  EXPECT_EQ(h.grad()->dtype(), DType::bf16);
  EXPECT_EQ(h.grad()->to_vector(), (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(hooks, 2);
}

// Each error names set_grad and says what is wrong.
TEST_P(AutogradTest, SetGradErrors) {
  auto x = leaf<2>({2, 3});
  auto g = Tensor<2>::ones({2, 3}, DType::f32, dev());
  auto expect_error = [](auto&& call, auto error, const std::string& words) {
    using E = decltype(error);
    try {
      call();
      ADD_FAILURE() << "no error; expected one saying '" << words << "'";
    } catch (const E& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("set_grad"), std::string::npos) << what;
      EXPECT_NE(what.find(words), std::string::npos) << what;
    }
  };
  auto plain = Tensor<2>::ones({2, 3}, DType::f32, dev());
  expect_error([&] { plain.set_grad(g); }, kiln::ValueError{""}, "requires_grad(true)");
  expect_error([&] { (x * 2.0f).set_grad(g); }, kiln::ValueError{""}, "leaf");
  expect_error(
      [&] {
        x.set_grad(Tensor<2>::ones({3, 2}, DType::f32, dev()));
      },
      kiln::ShapeError{""}, "[3, 2]");
  expect_error(
      [&] {
        x.set_grad(Tensor<2>::ones({2, 3}, DType::bf16, dev()));
      },
      kiln::DTypeError{""}, "bf16");
  auto row = leaf<2>({1, 3});
  expect_error(
      [&] {
        row.expand({4, 3}).set_grad(Tensor<2>::ones({4, 3}, DType::f32, dev()));
      },
      kiln::ValueError{""}, "broadcast");
  const auto devices = kt::test_devices();
  for (const kiln::Device& other : devices) {
    if (other == dev()) continue;
    expect_error(
        [&] {
          x.set_grad(Tensor<2>::ones({2, 3}, DType::f32, other));
        },
        kiln::DeviceError{""}, other.str());
  }
  EXPECT_FALSE(x.grad().has_value()) << "a refused set_grad changed the gradient";
}

TEST_P(AutogradTest, BackendNameShowsTheDecorator) {
  EXPECT_NE(dev().backend_name().find("autodiff<"), std::string::npos) << dev().backend_name();
}

TEST_P(AutogradTest, Errors) {
  auto i = Tensor<1>::from_data(std::vector<std::int32_t>{1, 2}, {2}, dev());
  EXPECT_THROW(i.requires_grad(true), kiln::DTypeError);
  auto x = leaf<1>({3});
  auto y = x * 2.0f;
  EXPECT_THROW(y.requires_grad(true), kiln::ValueError);  // not a leaf
  EXPECT_THROW(y.backward(), kiln::ShapeError);           // three elements, no grad_output
  EXPECT_THROW(y.backward(Tensor<1>::ones({2}, DType::f32, dev())), kiln::ShapeError);
  auto plain = Tensor<1>::ones({1}, DType::f32, dev());
  EXPECT_THROW(plain.sum().backward(), kiln::ValueError);  // needs no gradient
  y.backward(Tensor<1>::ones({3}, DType::f32, dev()));
  expect_near_all(x.grad()->to_vector(), {2, 2, 2}, "dx with grad_output");
  EXPECT_FALSE(y.grad().has_value());  // not a leaf
}

// docs/autodiff.md's example as a user would run it: plain SGD on a least-squares fit, the
// parameters replaced under NoGradGuard each step; the loss must fall to the noise floor.
TEST_P(AutogradTest, SgdFitsALinearModel) {
  const int n = 64, k = 5;
  auto x = Tensor<2>::from_data(kt::uniform(n * k, -1, 1, rng()), {n, k}, dev());
  // Weights of magnitude 0.5 to 2, so that the first loss is never near the noise floor.
  auto truth = Tensor<2>::from_data(kt::uniform(k, 0.5, 2, rng()), {k, 1}, dev());
  auto y = kiln::matmul(x, truth);
  auto w = Tensor<2>::zeros({k, 1}, DType::f32, dev()).requires_grad(true);
  float first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    auto loss = (kiln::matmul(x, w) - y).pow(2).mean();
    if (step == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    kiln::NoGradGuard no_grad;
    w = (w - *w.grad() * 0.5f).requires_grad(true);
  }
  EXPECT_GT(first, 0.1f);
  EXPECT_LT(last, 1e-6f * first) << "from " << first;
  const auto W = w.to_vector(), T = truth.to_vector();
  for (int i = 0; i < k; ++i) EXPECT_NEAR(W[i], T[i], 1e-3);
}

// Training steps of a small MLP (forward, backward, update under NoGradGuard) and forward-only
// steps leave the live buffers and autodiff nodes flat: each step's graph goes with its loss.
TEST_P(AutogradTest, StepsLeaveBuffersAndNodesFlat) {
  auto x = Tensor<2>::from_data(kt::uniform(32 * 16, -1, 1, rng()), {32, 16}, dev());
  auto y = Tensor<2>::from_data(kt::uniform(32 * 4, -1, 1, rng()), {32, 4}, dev());
  auto w1 = leaf<2>({16, 32}, -0.3, 0.3), w2 = leaf<2>({32, 4}, -0.3, 0.3);
  auto step = [&](bool train) {
    auto loss = kiln::mse_loss(kiln::matmul(kiln::matmul(x, w1).gelu(), w2), y);
    if (!train) return loss.item();
    loss.backward();
    kiln::NoGradGuard no_grad;
    w1 = (w1 - *w1.grad() * 0.05f).requires_grad(true);
    w2 = (w2 - *w2.grad() * 0.05f).requires_grad(true);
    return loss.item();
  };
  for (bool train : {true, false}) {
    for (int i = 0; i < 20; ++i) step(train);
    const auto buffers = kiln::memory_stats().live_buffers;
    const auto nodes = kiln::autodiff_stats().live_nodes;
    for (int i = 0; i < 300; ++i) step(train);
    EXPECT_EQ(kiln::memory_stats().live_buffers, buffers) << (train ? "training" : "forward");
    EXPECT_EQ(kiln::autodiff_stats().live_nodes, nodes) << (train ? "training" : "forward");
  }
  EXPECT_EQ(kiln::autodiff_stats().live_nodes, 0);  // no loss is held
}

// A chain of 100,000 recorded ops is released in a loop when its last tensor goes, and backward
// over a long chain runs without recursion.
TEST(Autograd, LongChainsNeitherRecurseNorOverflow) {
  auto x = Tensor<1>::ones({1}).requires_grad(true);
  {
    auto y = x;
    for (int i = 0; i < 100000; ++i) y = y * 1.0f;
  }
  auto y = x;
  for (int i = 0; i < 20000; ++i) y = y + 0.0f;
  y.sum().backward();
  EXPECT_EQ(x.grad()->to_vector(), std::vector<float>{1});
}

// Ops whose backward reads their own output (softmax, log_softmax, max, min) hold it weakly, so
// a graph dropped without backward is freed: before, output -> Meta -> node -> output was a cycle.
TEST_P(AutogradTest, AGraphDroppedWithoutBackwardIsFreed) {
  auto x = leaf<2>({5, 7});
  const auto before = kiln::autodiff_stats().live_nodes;
  {
    auto y = (x.softmax(1) + x.log_softmax(0)).max(1).sum() + x.min(0).sum();
    EXPECT_GT(kiln::autodiff_stats().live_nodes, before);
    (void)y.item();
  }
  EXPECT_EQ(kiln::autodiff_stats().live_nodes, before);
  // And a reader keeps such an output for backward after the user dropped it.
  auto loss = [&] {
    auto s = x.softmax(1);
    return (s * s).sum();  // the multiplication reads s
  }();
  loss.backward();
  ASSERT_TRUE(x.grad().has_value());
  for (float g : x.grad()->to_vector()) EXPECT_TRUE(std::isfinite(g));
}

#if KILN_WITH_FUSION
// A chain of element-wise ops on a tensor that needs a gradient writes nothing in forward but its
// result, as without a gradient: each recorded op keeps its writer's recipe, not the intermediate
// (src/autodiff/recipe.hpp). Backward is the seed and one fused kernel that recomputes the chain
// and writes x's gradient alone.
TEST_P(AutogradTest, FusedChainKeepsNoIntermediateAndBackwardIsOneKernel) {
  kt::ConfigGuard guard;
  kiln::Config c = kiln::config();
  c.fusion = true;
  kiln::set_config(c);
  auto x = leaf<2>({64, 48});
  auto chain = [&] { return ((((x * 1.5f + 0.5f).sin() * x).tanh() - x) * 0.25f).exp() + x; };
  const auto f0 = kiln::fusion_stats();
  auto y = chain().sum();
  const float loss = y.item();
  const auto f1 = kiln::fusion_stats();
  EXPECT_EQ(f1.outputs_written - f0.outputs_written, 0) << "forward wrote an intermediate";
  y.backward();
  const auto g = x.grad()->to_vector();
  const auto f2 = kiln::fusion_stats();
  EXPECT_LE(f2.groups_run - f1.groups_run, 2) << "backward ran more than the seed and one kernel";
  EXPECT_LE(f2.outputs_written - f1.outputs_written, 2) << "backward wrote an intermediate";
  // The gradient itself, against float64 central differences of the chain.
  const auto X = x.to_vector();
  auto f = [](double v) {
    return std::exp((std::tanh(std::sin(v * 1.5 + 0.5) * v) - v) * 0.25) + v;
  };
  for (std::size_t i = 0; i < X.size(); ++i) {
    const double h = 1e-6, want = (f(X[i] + h) - f(X[i] - h)) / (2 * h);
    ASSERT_NEAR(g[i], want, 2e-5 * (1 + std::fabs(want))) << "at " << i;
  }
  EXPECT_TRUE(std::isfinite(loss));
}
#endif

}  // namespace
