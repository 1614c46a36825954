// The CUDA norms' backward kernel called directly (Backend::norm_backward on the device's chain)
// against a float64 reference on fresh random inputs, with poisoned outputs: layer_norm and
// rms_norm, f32, bf16 and f16, with and without a weight, each gradient asked alone and all
// together, rows of 1 to 8192 elements (16-byte and single-element loads, every register count),
// no rows at all, the rows it declines, and a bf16 or f16 gradient of an f32 norm (autocast's,
// handed over by the fusion decorator: also through autodiff against the CPU), and a norm of x +
// residual's (the stream's gradient added to dx, dx also rounded to a half type). Skips without a
// GPU.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "dispatch/registry.hpp"
#include "kiln/autocast.hpp"
#include "kiln/norm.hpp"
#include "require_cuda.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;
using kiln::detail::Out;
using kiln::detail::RowOp;

struct Case {
  RowOp op;
  DType dtype;
  std::int64_t rows, n;
  bool weight;
  bool want_x = true, want_w = true, want_b = true;
  DType g_dtype = DType::f32;  // f32 for "x's dtype"; bf16 or f16 with an f32 x: a half g
  bool dsum = false;           // a residual stream's gradient added to dx (version 13)
  DType half = DType::f32;     // bf16 or f16 with an f32 x: dx also written as dx_half
};

std::vector<double> host(const Tensor<2>& t) {
  const auto v = t.to(DType::f32).to(kiln::Device::cpu()).to_vector<float>();
  return {v.begin(), v.end()};
}
std::vector<double> host(const Tensor<1>& t) {
  const auto v = t.to(DType::f32).to(kiln::Device::cpu()).to_vector<float>();
  return {v.begin(), v.end()};
}

void run(const Case& c) {
  SCOPED_TRACE(::testing::Message()
               << kiln::detail::row_op_name(c.op) << " " << kiln::dtype_name(c.dtype) << " ["
               << c.rows << ", " << c.n << "]" << (c.weight ? " weight" : "") << " want "
               << c.want_x << c.want_w << c.want_b << " g " << kiln::dtype_name(c.g_dtype)
               << (c.dsum ? " dsum" : "") << " dx_half " << kiln::dtype_name(c.half));
  const auto dev = kiln::Device::cuda(0);
  const bool layer = c.op == RowOp::layer_norm;
  static std::uint64_t seed = 500;
  const auto normal = kiln::Distribution::normal(0.0, 1.0);
  // x off centre, as activations are, so that the mean matters.
  const Tensor<2> x = (Tensor<2>::random({c.rows, c.n}, normal, dev, ++seed) + 0.5).to(c.dtype);
  const DType gt = c.dtype == DType::f32 ? c.g_dtype : c.dtype;
  const Tensor<2> g = Tensor<2>::random({c.rows, c.n}, normal, dev, ++seed).to(gt);
  const Tensor<1> w = Tensor<1>::random({c.n}, normal, dev, ++seed).to(c.dtype);
  const Tensor<2> dsum = Tensor<2>::random({c.rows, c.n}, normal, dev, ++seed).to(c.dtype);
  const std::vector<double> xh = host(x), gh = host(g),
                            wh = c.weight ? host(w) : std::vector<double>(c.n, 1.0);
  const std::vector<double> sh = host(dsum);

  // The forward's statistics, computed here (f32, as the forward writes them).
  const auto n = static_cast<std::size_t>(c.n);
  std::vector<float> mean(c.rows), rstd(c.rows);
  for (std::int64_t r = 0; r < c.rows; ++r) {
    double m = 0, q = 0;
    for (std::size_t j = 0; j < n; ++j) m += xh[r * n + j];
    m = layer ? m / c.n : 0.0;
    for (std::size_t j = 0; j < n; ++j) q += (xh[r * n + j] - m) * (xh[r * n + j] - m);
    mean[r] = static_cast<float>(m);
    rstd[r] = static_cast<float>(1.0 / std::sqrt(q / c.n + 1e-5));
  }
  const auto mean_t = Tensor<1>::from_data(mean, {c.rows}, dev);
  const auto rstd_t = Tensor<1>::from_data(rstd, {c.rows}, dev);

  // The float64 reference from the same (rounded) values.
  std::vector<double> dx(c.rows * n), dw(n, 0.0), db(n, 0.0);
  for (std::int64_t r = 0; r < c.rows; ++r) {
    double a = 0, cc = 0;
    std::vector<double> xhat(n);
    for (std::size_t j = 0; j < n; ++j) {
      xhat[j] = (xh[r * n + j] - mean[r]) * rstd[r];
      const double d = gh[r * n + j] * wh[j];
      a += d;
      cc += d * xhat[j];
      dw[j] += gh[r * n + j] * xhat[j];
      db[j] += gh[r * n + j];
    }
    a = layer ? a / c.n : 0.0;
    cc /= c.n;
    for (std::size_t j = 0; j < n; ++j) {
      dx[r * n + j] = rstd[r] * (gh[r * n + j] * wh[j] - a - xhat[j] * cc);
      if (c.dsum) dx[r * n + j] += sh[r * n + j];
    }
  }

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor<2> dx_t = Tensor<2>::full({c.rows, c.n}, nan, c.dtype, dev);
  const Tensor<1> dw_t = Tensor<1>::full({c.n}, nan, c.dtype, dev),
                  db_t = Tensor<1>::full({c.n}, nan, c.dtype, dev);
  kiln::detail::NormGrads grads;
  if (c.want_x) grads.dx = Out(*dx_t.handle());
  if (c.want_w && c.weight) grads.dw = Out(*dw_t.handle());
  if (c.want_b && layer) grads.db = Out(*db_t.handle());
  if (c.dsum) grads.dsum = dsum.handle().get();
  const Tensor<2> dx_half = Tensor<2>::full({c.rows, c.n}, nan, c.half, dev);
  if (c.half != DType::f32) grads.dx_half = Out(*dx_half.handle());
  auto& be = kiln::detail::backend(dev);
  ASSERT_TRUE(be.norm_backward(c.op, *x.handle(), *g.handle(),
                               c.weight ? w.handle().get() : nullptr,
                               layer ? mean_t.handle().get() : nullptr, *rstd_t.handle(), grads));
  const double tol = c.dtype == DType::f32 ? 1e-5 : c.dtype == DType::bf16 ? 8e-3 : 1e-3;
  if (grads.dx) kt::expect_close_to_scale("dx", host(dx_t), dx, tol, 1e-5);
  if (grads.dx_half) {
    kt::expect_close_to_scale("dx_half", host(dx_half), dx, c.half == DType::bf16 ? 8e-3 : 1e-3,
                              1e-5);
  }
  // The parameters' sums over rows carry f32 rounding of every row's term.
  if (grads.dw) kt::expect_close_to_scale("dw", host(dw_t), dw, std::max(tol, 1e-5), 1e-5);
  if (grads.db) kt::expect_close_to_scale("db", host(db_t), db, std::max(tol, 1e-5), 1e-5);
}

TEST(CudaNormBackward, AgainstFloat64) {
  KILN_REQUIRE_CUDA();
  for (RowOp op : {RowOp::layer_norm, RowOp::rms_norm}) {
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      for (std::int64_t n : {1, 7, 64, 768, 1000, 4096, 8192}) run({op, t, 37, n, true});
      run({op, t, 2049, 768, true});  // more rows than blocks: a block visits several
      run({op, t, 300, 768, false});
      run({op, t, 300, 768, true, true, false, false});
      run({op, t, 300, 768, true, false, true, false});
      run({op, t, 300, 768, true, false, false, true});
      run({op, t, 0, 768, true});  // no rows: zero parameter gradients
    }
    for (DType g : {DType::bf16, DType::f16}) {  // an f32 x's gradient as a half product gave it
      for (std::int64_t n : {7, 768, 4096}) run({op, DType::f32, 37, n, true, true, true, true, g});
    }
    // A norm of x + residual: the stream's gradient added, and dx rounded for a half residual.
    for (DType t : {DType::f32, DType::bf16})
      run({op, t, 300, 768, true, true, true, true, DType::f32, true});
    for (DType h : {DType::bf16, DType::f16}) {
      for (std::int64_t n : {7, 768, 8192}) {
        run({op, DType::f32, 37, n, true, true, true, true, DType::bf16, true, h});
        run({op, DType::f32, 37, n, true, true, false, false, DType::f32, false, h});
      }
    }
  }
}

TEST(CudaNormBackward, DeclinesRowsItCannotHold) {
  KILN_REQUIRE_CUDA();
  const auto dev = kiln::Device::cuda(0);
  auto& be = kiln::detail::backend(dev);
  for (std::int64_t n : {8193, 16384}) {  // single-element loads past 8192; 16-byte ones past it
    const auto x = Tensor<2>::ones({4, n}, DType::f32, dev);
    const auto rstd = Tensor<1>::ones({4}, DType::f32, dev);
    const auto dx = Tensor<2>::full({4, n}, 7.0, DType::f32, dev);
    kiln::detail::NormGrads grads;
    grads.dx = Out(*dx.handle());
    EXPECT_FALSE(be.norm_backward(RowOp::rms_norm, *x.handle(), *x.handle(), nullptr, nullptr,
                                  *rstd.handle(), grads))
        << n;
    EXPECT_EQ(dx.to(kiln::Device::cpu()).to_vector<float>()[0], 7.0f) << "written though declined";
    EXPECT_FALSE(be.norm_backward(RowOp::rms_norm, *x.handle(), *x.handle(), nullptr, nullptr,
                                  *rstd.handle(), {}))
        << "the question, " << n;
  }
  // With no gradient asked for, the answer for a row it holds is yes, and nothing runs.
  const auto x = Tensor<2>::ones({4, 768}, DType::f32, dev);
  const auto rstd = Tensor<1>::ones({4}, DType::f32, dev);
  EXPECT_TRUE(be.norm_backward(RowOp::rms_norm, *x.handle(), *x.handle(), nullptr, nullptr,
                               *rstd.handle(), {}));
}

}  // namespace

namespace {

// Under autocast an f32 layer_norm's output feeds a bf16 product, so its gradient arrives as the
// f32 cast of a bf16 tensor; the fusion decorator hands the kernel the bf16 tensor instead. The
// gradients through that path against the CPU's (which composes them).
TEST(CudaNormBackward, HalfGradientOfAnF32NormUnderAutocast) {
  KILN_REQUIRE_CUDA();
  const auto normal = kiln::Distribution::normal(0.0, 1.0);
  struct Grads {
    std::vector<float> dx, dw, db;
  };
  const auto run_on = [&](kiln::Device dev) {
    const auto x = (Tensor<2>::random({64, 768}, normal, kiln::Device::cpu(), 11) + 0.5).to(dev);
    const auto w = Tensor<1>::random({768}, normal, kiln::Device::cpu(), 12).to(dev);
    const auto b = Tensor<1>::random({768}, normal, kiln::Device::cpu(), 13).to(dev);
    const auto m = Tensor<2>::random({768, 96}, normal, kiln::Device::cpu(), 14).to(dev);
    x.requires_grad(true);
    w.requires_grad(true);
    b.requires_grad(true);
    Tensor<0> loss;
    {
      kiln::Autocast on(DType::bf16);
      const auto y = kiln::layer_norm(x, w, b);        // f32 (autocast's f32 list)
      loss = kiln::matmul(y, m).to(DType::f32).sum();  // a bf16 product of y
    }
    loss.backward();
    const auto host = [](const auto& t) {
      return t->to(DType::f32).to(kiln::Device::cpu()).template to_vector<float>();
    };
    return Grads{host(x.grad()), host(w.grad()), host(b.grad())};
  };
  const Grads cuda = run_on(kiln::Device::cuda(0)), cpu = run_on(kiln::Device::cpu());
  const auto close = [](const char* what, const std::vector<float>& got,
                        const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double scale = 0, worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      scale = std::max(scale, std::abs(double{want[i]}));
      worst = std::max(worst, std::abs(double{got[i]} - want[i]));
    }
    EXPECT_LE(worst, 1e-2 * scale) << what;  // bf16 products on both, summed in other orders
  };
  close("dx", cuda.dx, cpu.dx);
  close("dw", cuda.dw, cpu.dw);
  close("db", cuda.db, cpu.db);
}

}  // namespace
