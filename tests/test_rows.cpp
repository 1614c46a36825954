// softmax and log_softmax over the last dim, and layer_norm / rms_norm, through kiln::Tensor: the
// front end's route to Backend::rows. Float64 references on fresh random inputs for f32, bf16 and
// f16, over views the row kernel reads in place (slices of rows and of columns, a broadcast row)
// and views the front end copies first (a transposed x), ranks 1 to 3, rows of 1 element and
// rows of 100000 (CUDA's streaming kernel), and agreement with the composed path over other dims.
#include <cmath>

#include "kiln/norm.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

class RowsTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(RowsTest);

// Row-wise softmax of rows x n (values as stored), PyTorch's NaN rule.
std::vector<double> ref_softmax(const std::vector<float>& x, std::int64_t n, bool log) {
  std::vector<double> out;
  for (std::size_t r = 0; r < x.size() / static_cast<std::size_t>(n); ++r) {
    const float* row = x.data() + r * static_cast<std::size_t>(n);
    double m = -INFINITY, s = 0;
    for (std::int64_t j = 0; j < n; ++j) m = std::isnan(row[j]) ? NAN : std::max(m, double{row[j]});
    for (std::int64_t j = 0; j < n; ++j) s += std::exp(row[j] - m);
    for (std::int64_t j = 0; j < n; ++j)
      out.push_back(log ? row[j] - m - std::log(s) : std::exp(row[j] - m) / s);
  }
  return out;
}

// |got - want| <= atol + rtol * |want|, NaN only where NaN is expected.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double atol,
                  double rtol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << "at " << i << ": " << got[i] << ", expected NaN";
      continue;
    }
    if (got[i] == want[i]) continue;  // (infinities)
    ASSERT_LE(std::abs(got[i] - want[i]), atol + rtol * std::abs(want[i]))
        << "at " << i << ": " << got[i] << " vs " << want[i];
  }
}

// The bound for a result of dtype t: f32 work, or one rounding to the half type (and f16's
// subnormal spacing, 2^-24, below 2^-14).
double rtol(DType t) { return t == DType::bf16 ? 8e-3 : t == DType::f16 ? 1e-3 : 2e-5; }
double atol(DType t) { return t == DType::f16 ? 6e-8 : 1e-9; }

std::vector<float> values(const Tensor<2>& t) {
  return t.contiguous().to(DType::f32).to_vector<float>();
}

TEST_P(RowsTest, SoftmaxOverViewsAndDTypes) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (std::int64_t n : {1, 7, 64, 768, 4099}) {
      auto xs = kt::uniform(static_cast<std::size_t>(12 * (n + 3)), -6, 6, rng());
      const Tensor<2> base = Tensor<2>::from_data(xs, {12, n + 3}, dev()).to(dt);
      const std::vector<std::pair<const char*, Tensor<2>>> views = {
          {"contiguous", base.slice(1, 0, n).contiguous()},
          {"columns", base.slice(1, 2, n + 2)},                        // row stride n + 3, offset 2
          {"rows", base.slice(0, 5, 12).slice(1, 0, n).contiguous()},  // (a copy: own buffer)
          {"row slice", base.slice(0, 3, 9).slice(1, 1, n + 1)},
          {"transposed", base.slice(1, 0, n).contiguous().transpose(0, 1)},  // copied first
          {"broadcast", base.slice(0, 0, 1).slice(1, 0, n).expand({5, n})},
      };
      for (const auto& [name, x] : views) {
        SCOPED_TRACE(std::string(kiln::dtype_name(dt)) + " n=" + std::to_string(n) + " " + name);
        const auto xv = values(x);
        const std::int64_t cols = x.shape()[1];
        for (bool log : {false, true}) {
          const Tensor<2> y = log ? x.log_softmax(-1) : x.softmax(1);
          ASSERT_EQ(y.dtype(), dt);
          ASSERT_EQ(y.shape(), x.shape());
          expect_close(values(y), ref_softmax(xv, cols, log), log ? 3e-5 : atol(dt), rtol(dt));
        }
      }
    }
  }
}

TEST_P(RowsTest, LongRowsAndRanks) {
  auto xs = kt::uniform(2 * 100000, -10, 10, rng());
  const Tensor<2> x = Tensor<2>::from_data(xs, {2, 100000}, dev());
  expect_close(values(x.softmax(1)), ref_softmax(xs, 100000, false), 1e-10, 3e-5);
  expect_close(values(x.log_softmax(1)), ref_softmax(xs, 100000, true), 5e-5, 1e-5);
  // Rank 1 and rank 3 over the last dim; an integer input is softmaxed as f32.
  const Tensor<1> v = Tensor<1>::from_data(std::vector<float>{1, 2, 3, 4}, {4}, dev());
  expect_close(v.softmax(0).to_vector<float>(), ref_softmax({1, 2, 3, 4}, 4, false), 0, 1e-6);
  auto x3s = kt::uniform(2 * 3 * 50, -3, 3, rng());
  const Tensor<3> x3 = Tensor<3>::from_data(x3s, {2, 3, 50}, dev());
  expect_close(x3.log_softmax(2).to_vector<float>(), ref_softmax(x3s, 50, true), 1e-5, 1e-6);
  const auto i = Tensor<1>::from_data(std::vector<std::int32_t>{1, 2, 3}, {3}, dev()).softmax(0);
  EXPECT_EQ(i.dtype(), DType::f32);
  expect_close(i.to_vector<float>(), ref_softmax({1, 2, 3}, 3, false), 0, 1e-6);
  // Long norms: against the reference of test_norm.cpp's definitions.
  const auto r = kiln::layer_norm_with_stats(x);
  const auto rv = r.y.to_vector<float>();
  for (int row = 0; row < 2; ++row) {
    double mean = 0, var = 0;
    for (int j = 0; j < 100000; ++j) mean += xs[row * 100000 + j];
    mean /= 100000;
    for (int j = 0; j < 100000; ++j) var += std::pow(xs[row * 100000 + j] - mean, 2);
    const double rstd = 1 / std::sqrt(var / 100000 + 1e-5);
    EXPECT_NEAR(r.mean.to_vector<float>()[row], mean, 1e-5);
    EXPECT_NEAR(r.rstd.to_vector<float>()[row], rstd, 1e-5 * rstd);
    for (int j = 0; j < 100000; j += 997)
      ASSERT_NEAR(rv[row * 100000 + j], (xs[row * 100000 + j] - mean) * rstd, 2e-5);
  }
}

TEST_P(RowsTest, AgreesWithTheComposedPathOverAnotherDim) {
  auto xs = kt::uniform(40 * 33, -5, 5, rng());
  const Tensor<2> x = Tensor<2>::from_data(xs, {40, 33}, dev());
  for (bool log : {false, true}) {
    const Tensor<2> rows = log ? x.log_softmax(1) : x.softmax(1);
    const Tensor<2> composed = log ? x.transpose(0, 1).log_softmax(0).transpose(0, 1)
                                   : x.transpose(0, 1).softmax(0).transpose(0, 1);
    const auto a = values(rows), b = values(composed);
    for (std::size_t k = 0; k < a.size(); ++k)
      ASSERT_NEAR(a[k], b[k], 1e-5 * (1 + std::abs(b[k]))) << k;
  }
}

TEST_P(RowsTest, ExtremesAsPyTorch) {
  const float inf = INFINITY, nan = NAN;
  const std::vector<float> v = {1000, 1001, 1002, -1000, -inf, 0,    -inf, 5,     // large
                                88,   89,   -inf, -inf,  3,    nan,  1,    2,     // a NaN
                                -inf, -inf, -inf, -inf,  -inf, -inf, -inf, -inf,  // all -inf
                                1,    inf,  2,    3,     4,    5,    6,    7};    // +inf
  const Tensor<2> x = Tensor<2>::from_data(v, {4, 8}, dev());
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor<2> xt = x.to(dt);
    const auto xv = values(xt);
    expect_close(values(xt.softmax(1)), ref_softmax(xv, 8, false), 0, rtol(dt));
    expect_close(values(xt.log_softmax(1)), ref_softmax(xv, 8, true), 1e-5, rtol(dt));
  }
  const auto p = x.softmax(1).to_vector<float>();
  EXPECT_EQ(p[4], 0.0f);
  EXPECT_TRUE(std::isnan(p[13]) && std::isnan(p[8]) && std::isnan(p[16]) && std::isnan(p[24]));
}

TEST_P(RowsTest, NormsOverViews) {
  auto xs = kt::uniform(10 * 70, -3, 3, rng());
  const Tensor<2> base = Tensor<2>::from_data(xs, {10, 70}, dev());
  const Tensor<2> cols = base.slice(1, 3, 67).slice(0, 2, 10);  // [8, 64], strided rows, offset
  const auto w = Tensor<1>::from_data(kt::uniform(64, 0.5, 1.5, rng()), {64}, dev());
  const auto b =
      Tensor<1>::from_data(kt::uniform(128, -1, 1, rng()), {128}, dev()).slice(0, 0, 128, 2);
  const auto xv = values(cols), wv = w.to_vector<float>(), bv = b.contiguous().to_vector<float>();
  const auto r = kiln::layer_norm_with_stats(cols, w, b);  // b strided: made contiguous
  const auto q = kiln::rms_norm_with_stats(cols.transpose(0, 1).contiguous().transpose(0, 1), w);
  const auto ry = r.y.to_vector<float>(), qy = q.y.to_vector<float>();
  for (int row = 0; row < 8; ++row) {
    double mean = 0, var = 0, ms = 0;
    for (int j = 0; j < 64; ++j) mean += xv[row * 64 + j];
    mean /= 64;
    for (int j = 0; j < 64; ++j) {
      var += std::pow(xv[row * 64 + j] - mean, 2);
      ms += std::pow(xv[row * 64 + j], 2);
    }
    const double rstd = 1 / std::sqrt(var / 64 + 1e-5), qstd = 1 / std::sqrt(ms / 64 + 1e-6);
    for (int j = 0; j < 64; ++j) {
      ASSERT_NEAR(ry[row * 64 + j], (xv[row * 64 + j] - mean) * rstd * wv[j] + bv[j], 1e-5);
      ASSERT_NEAR(qy[row * 64 + j], xv[row * 64 + j] * qstd * wv[j], 1e-5);
    }
  }
}

}  // namespace

namespace {

// out_dtype: an f32 x's norm rounded to bf16 or f16 in its own pass is the f32 result cast,
// bit for bit (rows that stream on CUDA and rows of one-element loads too), and its gradient is
// the f32 path's; any other out_dtype is a DTypeError.
TEST_P(RowsTest, NormsIntoAHalfResult) {
  for (std::int64_t n : {7, 768, 100000}) {
    const auto x = Tensor<2>::random({5, n}, kiln::Distribution::normal(0.5, 2.0), dev(), seed());
    const auto w = Tensor<1>::random({n}, kiln::Distribution::normal(1.0, 0.5), dev(), seed());
    const auto b = Tensor<1>::random({n}, kiln::Distribution::normal(0.0, 0.5), dev(), seed());
    for (DType h : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(::testing::Message() << n << " " << kiln::dtype_name(h));
      const auto ln = kiln::layer_norm(x, w, b, 1e-5, h);
      const auto rms = kiln::rms_norm(x, w, 1e-6, h);
      ASSERT_EQ(ln.dtype(), h);
      EXPECT_EQ(ln.to(DType::f32).to_vector<float>(),
                kiln::layer_norm(x, w, b).to(h).to(DType::f32).to_vector<float>());
      EXPECT_EQ(rms.to(DType::f32).to_vector<float>(),
                kiln::rms_norm(x, w).to(h).to(DType::f32).to_vector<float>());
    }
  }
  // The gradients through a half result: those of the f32 result cast to it.
  const auto x = Tensor<2>::random({6, 768}, kiln::Distribution::normal(0.5, 2.0), dev(), seed());
  const auto c = Tensor<2>::random({6, 768}, kiln::Distribution::normal(0.0, 1.0), dev(), seed());
  const auto w = Tensor<1>::random({768}, kiln::Distribution::normal(1.0, 0.5), dev(), seed());
  std::vector<std::vector<float>> grads;
  for (const bool fused : {true, false}) {
    const auto xg = x.detach().requires_grad(true);
    const auto wg = w.detach().requires_grad(true);
    const auto y = fused ? kiln::layer_norm(xg, wg, std::nullopt, 1e-5, DType::bf16)
                         : kiln::layer_norm(xg, wg).to(DType::bf16);
    (y.to(DType::f32) * c).sum().backward();
    grads.push_back(xg.grad()->to_vector<float>());
    grads.push_back(wg.grad()->to_vector<float>());
  }
  EXPECT_EQ(grads[0], grads[2]);
  EXPECT_EQ(grads[1], grads[3]);
  const auto xb = x.to(DType::bf16);
  EXPECT_THROW(kiln::layer_norm(xb, std::nullopt, std::nullopt, 1e-5, DType::f16),
               kiln::DTypeError);
  EXPECT_THROW(kiln::rms_norm(x, std::nullopt, 1e-6, DType::i32), kiln::DTypeError);
}

}  // namespace
