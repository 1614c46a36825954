// layer_norm and rms_norm over the last dim: float64 references on fresh random inputs, f32 /
// bf16 / f16, with and without weight and bias, the saved per-row statistics, rows of length 1
// and odd lengths, large offsets, transposed inputs, inside a fused chain, empty tensors and
// the error paths.
#include <cmath>

#include "kiln/norm.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

class NormTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(NormTest);

struct RefNorm {
  std::vector<double> y, mean, rstd;
};

// x is rows x n row-major, values as the kernel sees them (already rounded to the input dtype).
RefNorm ref_norm(const std::vector<float>& x, std::int64_t rows, std::int64_t n,
                 const std::vector<float>* w, const std::vector<float>* b, double eps, bool rms) {
  RefNorm r;
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* row = x.data() + i * n;
    double mean = 0, var = 0;
    if (!rms) {
      for (std::int64_t j = 0; j < n; ++j) mean += row[j];
      mean /= static_cast<double>(n);
    }
    for (std::int64_t j = 0; j < n; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= static_cast<double>(n);
    double rstd = 1 / std::sqrt(var + eps);
    r.mean.push_back(mean);
    r.rstd.push_back(rstd);
    for (std::int64_t j = 0; j < n; ++j) {
      double y = (row[j] - mean) * rstd;
      if (w) y *= (*w)[static_cast<std::size_t>(j)];
      if (b) y += (*b)[static_cast<std::size_t>(j)];
      r.y.push_back(y);
    }
  }
  return r;
}

// |got - want| <= atol + rtol * |want| for every element.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double atol,
                  double rtol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::abs(got[i] - want[i]), atol + rtol * std::abs(want[i]))
        << "at " << i << ": " << got[i] << " vs " << want[i];
  }
}

// The absolute bound on y for values of magnitude ~1..4: f32 accumulation error, or one
// rounding to the half type (2^-8 for bf16, 2^-11 for f16) of outputs up to ~5.
double y_tol(DType t) { return t == DType::bf16 ? 4e-2 : t == DType::f16 ? 5e-3 : 1e-4; }

// The input as the kernel sees it: rounded to the dtype, read back as floats.
std::vector<float> rounded(const Tensor<2>& t) { return t.to(DType::f32).to_vector<float>(); }

TEST_P(NormTest, MatchesDoubleReferenceAcrossDTypesAndShapes) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (auto [rows, n] : {std::pair<std::int64_t, std::int64_t>{5, 1}, {7, 33}, {3, 1000}}) {
      for (bool rms : {false, true}) {
        for (int affine = 0; affine < 3; ++affine) {  // none, weight, weight + bias
          SCOPED_TRACE(std::string(kiln::dtype_name(dt)) + " " + std::to_string(rows) + "x" +
                       std::to_string(n) + (rms ? " rms" : " layer") + " affine " +
                       std::to_string(affine));
          auto xs = kt::uniform(static_cast<std::size_t>(rows * n), -3, 3, rng());
          Tensor<2> x = Tensor<2>::from_data(xs, {rows, n}, dev()).to(dt);
          auto ws = kt::uniform(static_cast<std::size_t>(n), 0.5, 1.5, rng());
          auto bs = kt::uniform(static_cast<std::size_t>(n), -1, 1, rng());
          Tensor<1> w = Tensor<1>::from_data(ws, {n}, dev()).to(dt);
          Tensor<1> b = Tensor<1>::from_data(bs, {n}, dev()).to(dt);
          auto wr = w.to(DType::f32).to_vector<float>(), br = b.to(DType::f32).to_vector<float>();
          const double eps = 1e-5;
          RefNorm want = ref_norm(rounded(x), rows, n, affine ? &wr : nullptr,
                                  affine == 2 && !rms ? &br : nullptr, eps, rms);
          std::optional<Tensor<1>> wo, bo;
          if (affine) wo = w;
          if (affine == 2) bo = b;
          if (rms) {
            auto r = kiln::rms_norm_with_stats(x, wo, eps);
            EXPECT_EQ(r.y.dtype(), dt);
            EXPECT_EQ(r.rstd.dtype(), DType::f32);
            EXPECT_EQ(r.rstd.shape()[0], rows);
            expect_close(r.y.to(DType::f32).to_vector<float>(), want.y, y_tol(dt), 1e-4);
            expect_close(r.rstd.to_vector<float>(), want.rstd, 0, 1e-4);
          } else {
            auto r = kiln::layer_norm_with_stats(x, wo, bo, eps);
            EXPECT_EQ(r.y.dtype(), dt);
            expect_close(r.y.to(DType::f32).to_vector<float>(), want.y, y_tol(dt), 1e-4);
            expect_close(r.mean.to_vector<float>(), want.mean, 1e-5, 1e-5);
            expect_close(r.rstd.to_vector<float>(), want.rstd, 0, 1e-4);
          }
        }
      }
    }
  }
}

TEST_P(NormTest, LargeOffsetsAndTransposedInput) {
  // A row of 1e4 + small noise: the two-pass mean keeps the variance accurate.
  auto xs = kt::uniform(64 * 17, -1, 1, rng());
  for (auto& v : xs) v += 1e4f;
  Tensor<2> x = Tensor<2>::from_data(xs, {17, 64}, dev()).transpose(0, 1);  // [64, 17], strided
  auto xc = x.contiguous().to_vector<float>();
  RefNorm want = ref_norm(xc, 64, 17, nullptr, nullptr, 1e-5, false);
  expect_close(kiln::layer_norm(x).to_vector<float>(), want.y, 2e-2, 1e-3);
  RefNorm want_rms = ref_norm(xc, 64, 17, nullptr, nullptr, 1e-6, true);
  expect_close(kiln::rms_norm(x).to_vector<float>(), want_rms.y, 1e-4, 1e-4);
}

TEST_P(NormTest, InsideAFusedChain) {
  auto xs = kt::uniform(9 * 31, -2, 2, rng());
  Tensor<2> x = Tensor<2>::from_data(xs, {9, 31}, dev());
  Tensor<2> y = kiln::layer_norm(x * 2 + 1) * 3 - 1;
  std::vector<float> pre(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) pre[i] = xs[i] * 2 + 1;
  RefNorm want = ref_norm(pre, 9, 31, nullptr, nullptr, 1e-5, false);
  for (auto& v : want.y) v = v * 3 - 1;
  expect_close(y.to_vector<float>(), want.y, 3e-4, 1e-4);
}

TEST_P(NormTest, RankOneAndThreeAndEmpty) {
  Tensor<1> v = Tensor<1>::from_data(std::vector<float>{1, 2, 3, 4}, {4}, dev());
  auto r = kiln::layer_norm_with_stats(v);
  EXPECT_NEAR(r.mean.item<float>(), 2.5, 1e-6);
  RefNorm want = ref_norm({1, 2, 3, 4}, 1, 4, nullptr, nullptr, 1e-5, false);
  expect_close(r.y.to_vector<float>(), want.y, 1e-6, 1e-6);

  auto xs = kt::uniform(2 * 3 * 5, -1, 1, rng());
  Tensor<3> x3 = Tensor<3>::from_data(xs, {2, 3, 5}, dev());
  auto r3 = kiln::rms_norm_with_stats(x3);
  EXPECT_EQ(r3.rstd.shape()[0], 2);
  EXPECT_EQ(r3.rstd.shape()[1], 3);
  expect_close(r3.y.to_vector<float>(), ref_norm(xs, 6, 5, nullptr, nullptr, 1e-6, true).y, 1e-5,
               1e-5);

  Tensor<2> empty = Tensor<2>::zeros({0, 8}, DType::f32, dev());
  auto re = kiln::layer_norm_with_stats(empty);
  EXPECT_EQ(re.y.numel(), 0);
  EXPECT_EQ(re.mean.numel(), 0);
}

TEST_P(NormTest, ErrorPaths) {
  Tensor<2> x = Tensor<2>::zeros({3, 4}, DType::f32, dev());
  EXPECT_THROW(kiln::layer_norm(x, Tensor<1>::ones({5}, DType::f32, dev())), kiln::ShapeError);
  EXPECT_THROW(kiln::rms_norm(x, Tensor<1>::ones({4}, DType::bf16, dev())), kiln::DTypeError);
  EXPECT_THROW(kiln::layer_norm(x, std::nullopt, Tensor<1>::ones({4}, DType::f16, dev())),
               kiln::DTypeError);
  EXPECT_THROW(kiln::layer_norm(Tensor<2>::zeros({3, 4}, DType::i32, dev())), kiln::DTypeError);
  EXPECT_THROW(kiln::layer_norm(x, std::nullopt, std::nullopt, -1.0), kiln::ValueError);
  EXPECT_THROW(kiln::rms_norm(Tensor<2>::zeros({3, 0}, DType::f32, dev())), kiln::ValueError);
}

}  // namespace
