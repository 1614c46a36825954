// kiln::optim::GradScaler (kiln/optim/grad_scaler.hpp), on every device present: a step with
// scaled gradients equals the unscaled step (float64 reference); an inf gradient skips the step
// and halves the scale; the scale grows after growth_interval clean steps; clipping after unscale
// sees the true norm; gradients too small for f16 survive an f16 autocast backward only when
// scaled; a small GPT-2 trains under f16 autocast with it; disabled, it passes through; errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.hpp"
#include "kiln/nn/gpt2.hpp"
#include "kiln/optim.hpp"
#include "test_support.hpp"
#include "tiny_gpt2.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;
namespace optim = kiln::optim;
namespace nn = kiln::nn;

class GradScalerTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(GradScalerTest);

// A parameter p and loss = sum(p * c): p's gradient is c.
struct Problem {
  nn::Parameter<1> p;
  Tensor<1> c;
  Tensor<0> loss() const { return (p.tensor() * c).sum(); }
};

std::vector<nn::AnyParameter> params(const nn::AnyParameter& p) { return {p}; }

Problem problem(const std::vector<float>& ps, const std::vector<float>& cs, kiln::Device dev) {
  const auto n = static_cast<std::int64_t>(ps.size());
  return {nn::Parameter<1>(Tensor<1>::from_data(ps, {n}, dev)), Tensor<1>::from_data(cs, {n}, dev)};
}

TEST_P(GradScalerTest, AScaledStepIsTheUnscaledStep) {
  const auto ps = kt::uniform(6, -1, 1, rng()), cs = kt::uniform(6, -1, 1, rng());
  auto pr = problem(ps, cs, dev());
  optim::SGD opt(params(pr.p), {.lr = 0.5});
  optim::GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  scaler.scale(pr.loss()).backward();
  const auto g = pr.p.grad()->to_vector();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(g[i], cs[i] * 65536.0f) << i;  // grad() stays scaled
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  const auto got = pr.p.tensor().to_vector();
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got[i], double(ps[i]) - 0.5 * cs[i], 1e-6) << i;
}

TEST_P(GradScalerTest, AnInfGradientSkipsTheStepAndBacksOff) {
  const float inf = std::numeric_limits<float>::infinity();
  auto pr = problem({1, 2, 3}, {1, inf, 1}, dev());
  optim::SGD opt(params(pr.p), {.lr = 0.5});
  optim::GradScaler scaler({.init_scale = 1024});
  scaler.scale(pr.loss()).backward();
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(pr.p.tensor().to_vector(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(opt.steps(), 0);
  opt.zero_grad();
  // The next, finite step is unscaled by its own scale only: zero_grad dropped the skipped step's
  // 1 / 1024.
  pr.c = Tensor<1>::from_data({1.f, 1.f, 1.f}, {3}, dev());
  scaler.scale(pr.loss()).backward();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(pr.p.tensor().to_vector(), (std::vector<float>{0.5, 1.5, 2.5}));
}

TEST_P(GradScalerTest, TheScaleGrowsAfterGrowthIntervalCleanSteps) {
  auto pr = problem({1, 2}, {0.5, 0.25}, dev());
  optim::SGD opt(params(pr.p), {.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 8, .growth_interval = 3});
  for (int step = 1; step <= 6; ++step) {
    scaler.scale(pr.loss()).backward();
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
    opt.zero_grad();
    EXPECT_EQ(scaler.get_scale(), step < 3 ? 8.0 : step < 6 ? 16.0 : 32.0) << step;
  }
  // Six steps of p -= 0.1 c, whatever the scale was.
  const auto got = pr.p.tensor().to_vector();
  EXPECT_NEAR(got[0], 1 - 0.6 * 0.5, 1e-6);
  EXPECT_NEAR(got[1], 2 - 0.6 * 0.25, 1e-6);
}

TEST_P(GradScalerTest, ClippingAfterUnscaleSeesTheTrueNorm) {
  const auto ps = kt::uniform(5, -1, 1, rng()), cs = kt::uniform(5, -2, 2, rng());
  auto pr = problem(ps, cs, dev());
  optim::SGD opt(params(pr.p), {.lr = 1.0});
  optim::GradScaler scaler;
  scaler.scale(pr.loss()).backward();
  scaler.unscale(opt);
  EXPECT_THROW(scaler.unscale(opt), kiln::ValueError);
  double norm = 0;
  for (float c : cs) norm += double(c) * c;
  norm = std::sqrt(norm);
  EXPECT_NEAR(opt.clip_grad_norm(0.5).item(), norm, 1e-5 * norm);
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  const auto got = pr.p.tensor().to_vector();
  const double coef = std::min(1.0, 0.5 / (norm + 1e-6));
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(got[i], ps[i] - coef * cs[i], 1e-5) << i;
}

// loss = sum(f32(x w) * 1e-8) with x w an f16 product: the gradient reaching the product, 1e-8,
// is below f16's smallest subnormal (6e-8) and flushes to zero unless the loss is scaled.
TEST_P(GradScalerTest, SmallGradientsSurviveF16BackwardOnlyWhenScaled) {
  const auto xs = kt::uniform(3 * 4, 0.5, 1, rng()), ws = kt::uniform(4 * 2, -1, 1, rng());
  const auto x = Tensor<2>::from_data(xs, {3, 4}, dev());
  for (const bool enabled : {false, true}) {
    SCOPED_TRACE(enabled ? "scaled" : "not scaled");
    nn::Parameter<2> w(Tensor<2>::from_data(ws, {4, 2}, dev()));
    optim::GradScaler scaler({.enabled = enabled});
    Tensor<0> loss;
    {
      const kiln::Autocast on(DType::f16);
      loss = (kiln::matmul(x, w.tensor()).to(DType::f32) * 1e-8f).sum();
    }
    scaler.scale(loss).backward();
    // grad() holds the scaled gradient (f32, as w): divided by the scale, the true one.
    ASSERT_EQ(w.grad()->dtype(), DType::f32);
    const auto got = w.grad()->to_vector();
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 2; ++j) {
        double g = 0;  // d loss / d w[k, j] = 1e-8 sum_i x[i, k], x rounded to f16
        for (int i = 0; i < 3; ++i) g += double(float(kiln::float16(xs[i * 4 + k]))) * 1e-8;
        const double unscaled = got[k * 2 + j] / scaler.get_scale();
        if (enabled)
          EXPECT_NEAR(unscaled, g, 2e-3 * g) << k << " " << j;
        else
          EXPECT_EQ(unscaled, 0.0) << k << " " << j;
      }
  }
}

TEST_P(GradScalerTest, Gpt2TrainsUnderF16Autocast) {
  nn::manual_seed(seed());
  nn::GPT2 model(kiln_test::kTinyGpt2);
  model.to(dev());
  const auto [ids, targets] = kiln_test::tiny_gpt2_batch(5, 7, dev());
  optim::AdamW opt(optim::decay_groups(model, 0.1), {.lr = 1e-2});
  optim::GradScaler scaler;
  float first = 0, last = 0;
  int stepped = 0;
  for (int step = 0; step < 15; ++step) {
    Tensor<0> loss;
    {
      const kiln::Autocast on(DType::f16);
      loss = model.loss(ids, targets);
    }
    scaler.scale(loss).backward();
    scaler.unscale(opt);
    opt.clip_grad_norm(1.0);
    stepped += scaler.step(opt);
    scaler.update();
    opt.zero_grad();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_GE(stepped, 12);  // a skipped step or two while the scale finds its level is normal
  EXPECT_NEAR(first, std::log(64.0), 0.5);
  EXPECT_LT(last, 0.5f * first) << "from " << first;
}

TEST(GradScaler, DisabledPassesThrough) {
  auto pr = problem({1, 2}, {4, 8}, kiln::Device::cpu());
  optim::SGD opt(params(pr.p), {.lr = 0.25});
  optim::GradScaler scaler({.enabled = false});
  EXPECT_EQ(scaler.get_scale(), 1.0);
  scaler.scale(pr.loss()).backward();
  EXPECT_EQ(pr.p.grad()->to_vector(), (std::vector<float>{4, 8}));
  scaler.unscale(opt);
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(pr.p.tensor().to_vector(), (std::vector<float>{0, 0}));
}

TEST(GradScaler, BadOptionsAndOrderAreValueErrors) {
  using O = optim::GradScalerOptions;
  for (const O& o : {O{.init_scale = 0}, O{.init_scale = INFINITY}, O{.growth_factor = 1.0},
                     O{.backoff_factor = 1.0}, O{.backoff_factor = 0.0}, O{.growth_interval = 0}})
    EXPECT_THROW(optim::GradScaler{o}, kiln::ValueError);
  optim::GradScaler scaler;
  EXPECT_THROW(scaler.update(), kiln::ValueError);  // nothing unscaled yet
  auto pr = problem({1}, {1}, kiln::Device::cpu());
  optim::SGD opt(params(pr.p));
  EXPECT_THROW(opt.scale_grads(0.0), kiln::ValueError);
  EXPECT_THROW(opt.scale_grads(NAN), kiln::ValueError);
}

}  // namespace
