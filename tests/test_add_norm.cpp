// add_layer_norm and add_rms_norm (a norm of x + residual that returns the sum too) against
// float64 references on fresh random inputs: the sum and y forward, and every gradient (x, the
// residual, weight, bias) through autodiff with both outputs used, one of them, and neither
// affine parameter; f32, bf16 and f16, a half residual on an f32 stream (autocast's), rows held
// in registers and rows streamed (long rows, whose backward the CUDA kernel declines), and the
// error paths; the sum dropped before backward and a graph dropped without one.
#include <cmath>

#include "kiln/autocast.hpp"
#include "kiln/autograd.hpp"
#include "kiln/nn/norm.hpp"
#include "kiln/norm.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

class AddNormTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(AddNormTest);

struct Case {
  DType x, residual;
  std::int64_t rows, n;
  bool rms = false;
  bool use_y = true, use_sum = true;
  std::optional<DType> out = std::nullopt;
};

// Rounds v to dtype t, as a tensor of t stores it.
double as_stored(double v, DType t) {
  return Tensor<1>::from_data(std::vector<float>{static_cast<float>(v)}, {1}, kiln::Device::cpu())
      .to(t)
      .to(DType::f32)
      .to_vector<float>()[0];
}

void check(const Case& c, const kiln::Device& dev, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message()
               << (c.rms ? "add_rms_norm " : "add_layer_norm ") << kiln::dtype_name(c.x) << " + "
               << kiln::dtype_name(c.residual) << " [" << c.rows << ", " << c.n << "]"
               << " y " << c.use_y << " sum " << c.use_sum);
  const auto un = static_cast<std::size_t>(c.n);
  const std::size_t count = static_cast<std::size_t>(c.rows) * un;
  // x off centre, as a residual stream is, so that the mean matters.
  auto xs = kt::uniform(count, -2, 3, rng), rs = kt::uniform(count, -1, 1, rng);
  const auto x = Tensor<2>::from_data(xs, {c.rows, c.n}, dev).to(c.x).detach().requires_grad(true);
  const auto r =
      Tensor<2>::from_data(rs, {c.rows, c.n}, dev).to(c.residual).detach().requires_grad(true);
  const auto w = Tensor<1>::from_data(kt::uniform(un, 0.5, 1.5, rng), {c.n}, dev)
                     .to(c.x)
                     .detach()
                     .requires_grad(true);
  const auto b = Tensor<1>::from_data(kt::uniform(un, -1, 1, rng), {c.n}, dev)
                     .to(c.x)
                     .detach()
                     .requires_grad(true);
  const auto gy = Tensor<2>::from_data(kt::uniform(count, -1, 1, rng), {c.rows, c.n}, dev);
  const auto gs = Tensor<2>::from_data(kt::uniform(count, -1, 1, rng), {c.rows, c.n}, dev);

  const auto got = c.rms ? kiln::add_rms_norm(x, r, w, 1e-5, c.out)
                         : kiln::add_layer_norm(x, r, w, b, 1e-5, c.out);
  EXPECT_EQ(got.sum.dtype(), c.x);
  EXPECT_EQ(got.y.dtype(), c.out.value_or(c.x));

  // The float64 reference, from the values as stored: s = x + r rounded to x's dtype.
  const std::vector<double> xh = kt::host_values(x), rh = kt::host_values(r),
                            wh = kt::host_values(w), bh = kt::host_values(b);
  // y's gradient reaches the norm in y's dtype (the cast's backward rounds it), s's in x's.
  const std::vector<double> gyh = kt::host_values(gy.to(c.out.value_or(c.x))),
                            gsh = kt::host_values(gs.to(c.x));
  std::vector<double> s(count), y(count), dx(count), dw(un, 0.0), db(un, 0.0);
  for (std::size_t i = 0; i < count; ++i) s[i] = as_stored(xh[i] + rh[i], c.x);
  for (std::int64_t row = 0; row < c.rows; ++row) {
    const double* sr = s.data() + row * c.n;
    double mean = 0, var = 0;
    if (!c.rms) {
      for (std::size_t j = 0; j < un; ++j) mean += sr[j];
      mean /= static_cast<double>(c.n);
    }
    for (std::size_t j = 0; j < un; ++j) var += (sr[j] - mean) * (sr[j] - mean);
    const double rstd = 1 / std::sqrt(var / static_cast<double>(c.n) + 1e-5);
    std::vector<double> xhat(un);
    double a = 0, cc = 0;
    for (std::size_t j = 0; j < un; ++j) {
      const std::size_t at = row * un + j;
      xhat[j] = (sr[j] - mean) * rstd;
      y[at] = xhat[j] * wh[j] + (c.rms ? 0.0 : bh[j]);
      const double g = c.use_y ? gyh[at] : 0.0;
      a += g * wh[j];
      cc += g * wh[j] * xhat[j];
      dw[j] += g * xhat[j];
      db[j] += g;
    }
    a = c.rms ? 0.0 : a / static_cast<double>(c.n);
    cc /= static_cast<double>(c.n);
    for (std::size_t j = 0; j < un; ++j) {
      const std::size_t at = row * un + j;
      const double g = c.use_y ? gyh[at] : 0.0;
      dx[at] = rstd * (g * wh[j] - a - xhat[j] * cc) + (c.use_sum ? gsh[at] : 0.0);
    }
  }
  const auto tol = [](DType t) { return t == DType::f32 ? 2e-5 : t == DType::bf16 ? 1e-2 : 2e-3; };
  kt::expect_close_to_scale("sum", kt::host_values(got.sum), s, 1e-6, 0);
  kt::expect_close_to_scale("y", kt::host_values(got.y), y, tol(c.out.value_or(c.x)), 1e-6);

  // Backward of sum(y gy) + sum(sum gs), or of one of the two.
  if (c.use_y && c.use_sum) {
    ((got.y.to(DType::f32) * gy).sum() + (got.sum.to(DType::f32) * gs).sum()).backward();
  } else if (c.use_y) {
    (got.y.to(DType::f32) * gy).sum().backward();
  } else {
    (got.sum.to(DType::f32) * gs).sum().backward();
  }
  const double g_tol = std::max(tol(c.x), 4e-5);  // the row sums of f32 terms
  kt::expect_close_to_scale("dx", kt::host_values(*x.grad()), dx, g_tol, 1e-6);
  ASSERT_EQ(r.grad()->dtype(), c.residual);
  kt::expect_close_to_scale("dresidual", kt::host_values(*r.grad()), dx,
                            std::max(g_tol, tol(c.residual)), 1e-6);
  if (!c.use_y) {  // no gradient reached the norm's output: none for its parameters
    EXPECT_FALSE(w.grad().has_value() &&
                 kt::host_values(*w.grad()) != std::vector<double>(un, 0.0));
    return;
  }
  kt::expect_close_to_scale("dw", kt::host_values(*w.grad()), dw, g_tol, 1e-5);
  if (!c.rms) kt::expect_close_to_scale("db", kt::host_values(*b.grad()), db, g_tol, 1e-5);
}

TEST_P(AddNormTest, MatchesFloat64ReferencesForwardAndBackward) {
  const Case cases[] = {
      {DType::f32, DType::f32, 7, 33},
      {DType::f32, DType::f32, 6, 768, true},
      {DType::f32, DType::bf16, 9, 768, false, true, true, DType::bf16},  // GPT-2 under autocast
      {DType::f32, DType::f16, 5, 100, true, true, true, DType::f16},
      {DType::bf16, DType::bf16, 4, 64},
      {DType::f16, DType::f16, 3, 1000, true},
      {DType::f32, DType::bf16, 5, 1},
      {DType::f32, DType::f32, 2, 40000},  // streamed forward; a composed backward on CUDA
      {DType::f32, DType::bf16, 2, 9000, false, true, true, DType::bf16},  // backward composed
      {DType::f32, DType::bf16, 6, 128, false, true, false},               // sum unused
      {DType::f32, DType::bf16, 6, 128, false, false, true},               // y unused
  };
  for (const Case& c : cases) check(c, dev(), rng());
}

// The module form and GPT-2's use of it: LayerNorm::add is {x + r, ln(x + r)}, the same values as
// the two ops; under autocast an f32 stream takes a bf16 branch.
TEST_P(AddNormTest, LayerNormModuleAddsAsTheTwoOpsWould) {
  kiln::nn::LayerNorm ln(48);
  ln.to(dev());
  const auto x = Tensor<3>::from_data(kt::uniform(2 * 5 * 48, -2, 2, rng()), {2, 5, 48}, dev());
  const auto r = Tensor<3>::from_data(kt::uniform(2 * 5 * 48, -2, 2, rng()), {2, 5, 48}, dev());
  const auto fused = ln.add(x, r);
  const auto sum = x + r;
  const auto apart = ln(sum);
  EXPECT_EQ(fused.sum.to_vector<float>(), sum.to_vector<float>());
  const auto a = fused.y.to_vector<float>(), e = apart.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], e[i], 1e-5) << i;
  kiln::Autocast on(DType::bf16);
  const auto half = ln.add(x, r.to(DType::bf16), DType::bf16);
  EXPECT_EQ(half.sum.dtype(), DType::f32);
  EXPECT_EQ(half.y.dtype(), DType::bf16);
}

// The op holds its sum weakly (a strong hold would be a cycle through the sum's gradient record):
// a graph dropped without backward is freed, and a sum dropped before backward (a model's last
// norm) is added again from x and the residual, to the same gradients.
TEST_P(AddNormTest, TheSumDroppedBeforeBackwardAndGraphsDroppedWithoutOne) {
  const auto x =
      Tensor<2>::from_data(kt::uniform(6 * 40, -2, 2, rng()), {6, 40}, dev()).requires_grad(true);
  const auto r = Tensor<2>::from_data(kt::uniform(6 * 40, -2, 2, rng()), {6, 40}, dev())
                     .to(DType::bf16)
                     .detach()
                     .requires_grad(true);
  const auto gy = Tensor<2>::from_data(kt::uniform(6 * 40, -1, 1, rng()), {6, 40}, dev());
  const auto grads = [&](bool keep_sum) {
    x.zero_grad();
    r.zero_grad();
    std::optional<Tensor<2>> sum;
    Tensor<2> y = [&] {
      auto out = kiln::add_layer_norm(x, r);
      if (keep_sum) sum = out.sum;
      return out.y;
    }();
    (y * gy).sum().backward();
    return std::pair{x.grad()->to_vector<float>(), r.grad()->to_vector<float>()};
  };
  EXPECT_EQ(grads(true), grads(false));
  const auto nodes = kiln::autodiff_stats().live_nodes;
  { const auto out = kiln::add_layer_norm(x, r); }
  EXPECT_EQ(kiln::autodiff_stats().live_nodes, nodes);
}

TEST_P(AddNormTest, ErrorPaths) {
  const auto x = Tensor<2>::zeros({3, 4}, DType::f32, dev());
  const auto w = Tensor<1>::ones({4}, DType::f32, dev());
  // The residual's shape (no broadcasting) and dtype (x's, or half for an f32 x).
  EXPECT_THROW(kiln::add_layer_norm(x, Tensor<2>::zeros({3, 5}, DType::f32, dev())),
               kiln::ShapeError);
  EXPECT_THROW(kiln::add_layer_norm(x, Tensor<2>::zeros({1, 4}, DType::f32, dev())),
               kiln::ShapeError);
  EXPECT_THROW(kiln::add_rms_norm(x.to(DType::bf16), x), kiln::DTypeError);
  EXPECT_THROW(kiln::add_layer_norm(x, Tensor<2>::zeros({3, 4}, DType::i32, dev())),
               kiln::DTypeError);
  EXPECT_THROW(kiln::add_rms_norm(x, x, Tensor<1>::ones({5}, DType::f32, dev())), kiln::ShapeError);
  EXPECT_THROW(kiln::add_layer_norm(x, x, w, std::nullopt, -1.0), kiln::ValueError);
  EXPECT_THROW(kiln::add_layer_norm(x, x, w, std::nullopt, 1e-5, DType::i32), kiln::DTypeError);
  EXPECT_THROW(kiln::add_layer_norm(Tensor<2>::zeros({3, 0}, DType::f32, dev()),
                                    Tensor<2>::zeros({3, 0}, DType::f32, dev())),
               kiln::ValueError);
  if (!(dev() == kiln::Device::cpu())) {
    EXPECT_THROW(kiln::add_layer_norm(x, x.to(kiln::Device::cpu())), kiln::DeviceError);
  }
  // Strided operands are copied, not refused: a transposed residual gives the dense one's result.
  const auto a = Tensor<2>::from_data(kt::uniform(12, -1, 1, rng()), {3, 4}, dev());
  const auto t = Tensor<2>::from_data(kt::uniform(12, -1, 1, rng()), {4, 3}, dev());
  EXPECT_EQ(kiln::add_layer_norm(a, t.transpose(0, 1)).y.to_vector<float>(),
            kiln::add_layer_norm(a, t.transpose(0, 1).contiguous()).y.to_vector<float>());
}

}  // namespace
