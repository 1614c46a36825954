// kiln::optim on every device: SGD (momentum, dampening, nesterov, weight decay) and AdamW (bias
// correction, decoupled weight decay) against float64 evaluations of PyTorch's update formulas
// over several steps with known gradients; parameter groups; lr changes between steps; gradient
// clipping by global norm; the warmup + cosine schedule; the error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;
namespace nn = kiln::nn;
namespace optim = kiln::optim;

// Two parameters, w [3, 4] (decayed by decay_groups) and b [4] (not).
struct Two : nn::Module {
  nn::Parameter<2> w;
  nn::Parameter<1> b;
  Two(const std::vector<float>& w0, const std::vector<float>& b0, kiln::Device d)
      : w(Tensor<2>::from_data(w0, {3, 4}, d)), b(Tensor<1>::from_data(b0, {4}, d)) {
    register_parameter("w", w);
    register_parameter("b", b);
  }
};

class OptimTest : public kt::DeviceTest {
 protected:
  static constexpr int kSteps = 6;
  void SetUp() override {
    kt::DeviceTest::SetUp();
    w0 = kt::uniform(12, -1, 1, rng());
    b0 = kt::uniform(4, -1, 1, rng());
    for (int k = 0; k < kSteps; ++k) {
      gw.push_back(kt::uniform(12, -2, 2, rng()));
      gb.push_back(kt::uniform(4, -2, 2, rng()));
    }
  }
  // Runs kSteps of opt on m with the gradients gw[k], gb[k] (loss = sum(w * gw) + sum(b * gb)),
  // the learning rate lr(k) set before each step.
  template <class Opt>
  void run(Two& m, Opt& opt, const std::function<double(int)>& lr) {
    for (int k = 0; k < kSteps; ++k) {
      const auto cw = Tensor<2>::from_data(gw[k], {3, 4}, dev());
      const auto cb = Tensor<1>::from_data(gb[k], {4}, dev());
      ((m.w.tensor() * cw).sum() + (m.b.tensor() * cb).sum()).backward();
      opt.set_lr(lr(k));
      opt.step();
      opt.zero_grad();
      EXPECT_FALSE(m.w.grad().has_value());
    }
  }
  void expect_params(const Two& m, const std::vector<double>& w, const std::vector<double>& b) {
    const auto gw_ = m.w.tensor().to_vector(), gb_ = m.b.tensor().to_vector();
    for (int i = 0; i < 12; ++i) EXPECT_NEAR(gw_[i], w[i], 2e-5 + 2e-5 * std::fabs(w[i])) << i;
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(gb_[i], b[i], 2e-5 + 2e-5 * std::fabs(b[i])) << i;
  }
  static double lr_at(int k) { return k < 3 ? 0.1 : 0.05; }

  std::vector<float> w0, b0;
  std::vector<std::vector<float>> gw, gb;
};
KILN_INSTANTIATE_DEVICES(OptimTest);

struct SgdCase {
  double momentum, dampening, weight_decay;
  bool nesterov;
};

TEST_P(OptimTest, SgdMatchesTorchFormulasInFloat64) {
  for (const SgdCase c : {SgdCase{0, 0, 0, false}, SgdCase{0, 0, 0.1, false},
                          SgdCase{0.9, 0.1, 0.01, false}, SgdCase{0.9, 0, 0.05, true}}) {
    SCOPED_TRACE(::testing::Message() << "momentum " << c.momentum << " dampening " << c.dampening
                                      << " wd " << c.weight_decay << " nesterov " << c.nesterov);
    Two m(w0, b0, dev());
    optim::SGD opt(optim::decay_groups(m, c.weight_decay), {.lr = 0.1,
                                                            .momentum = c.momentum,
                                                            .dampening = c.dampening,
                                                            .weight_decay = 0.0,
                                                            .nesterov = c.nesterov});
    run(m, opt, lr_at);
    auto reference = [&](std::vector<float> p0, const std::vector<std::vector<float>>& gs,
                         double wd) {
      std::vector<double> p(p0.begin(), p0.end()), buf(p.size());
      for (int k = 0; k < kSteps; ++k)
        for (std::size_t i = 0; i < p.size(); ++i) {
          double g = gs[k][i] + wd * p[i];
          if (c.momentum != 0) {
            buf[i] = k == 0 ? g : c.momentum * buf[i] + (1 - c.dampening) * g;
            g = c.nesterov ? g + c.momentum * buf[i] : buf[i];
          }
          p[i] -= lr_at(k) * g;
        }
      return p;
    };
    expect_params(m, reference(w0, gw, c.weight_decay), reference(b0, gb, 0.0));
  }
}

TEST_P(OptimTest, AdamWMatchesTorchFormulasInFloat64) {
  Two m(w0, b0, dev());
  const optim::AdamWOptions o{
      .lr = 0.1, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1};
  optim::AdamW opt(optim::decay_groups(m, o.weight_decay), o);
  run(m, opt, lr_at);
  auto reference = [&](std::vector<float> p0, const std::vector<std::vector<float>>& gs,
                       double wd) {
    std::vector<double> p(p0.begin(), p0.end()), mo(p.size()), v(p.size());
    for (int k = 0; k < kSteps; ++k) {
      const double lr = lr_at(k), t = k + 1;
      const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
      for (std::size_t i = 0; i < p.size(); ++i) {
        const double g = gs[k][i];
        p[i] *= 1 - lr * wd;
        mo[i] = o.beta1 * mo[i] + (1 - o.beta1) * g;
        v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
        p[i] -= lr / bc1 * mo[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + o.eps);
      }
    }
    return p;
  };
  expect_params(m, reference(w0, gw, o.weight_decay), reference(b0, gb, 0.0));
  EXPECT_EQ(opt.steps(), kSteps);
}

// bf16 parameters stay bf16 (their state too) and follow the float64 update within bf16's
// rounding of each step's result.
TEST_P(OptimTest, Bf16ParametersKeepTheirDtype) {
  Two m(w0, b0, dev());
  m.to(DType::bf16);
  const auto start = kt::host_values(m.w.tensor());  // w0 rounded to bf16
  optim::SGD opt(m.parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<double> p(start), buf(12);
  for (int k = 0; k < kSteps; ++k) {
    const auto cw = Tensor<2>::from_data(gw[k], {3, 4}, dev()).to(DType::bf16);
    const auto cb = Tensor<1>::from_data(gb[k], {4}, dev()).to(DType::bf16);
    ((m.w.tensor() * cw).sum() + (m.b.tensor() * cb).sum()).backward();
    EXPECT_EQ(m.w.grad()->dtype(), DType::bf16);
    const auto g = kt::host_values(*m.w.grad());
    opt.step();
    opt.zero_grad();
    for (int i = 0; i < 12; ++i) {
      buf[i] = k == 0 ? g[i] : 0.9 * buf[i] + g[i];
      p[i] -= 0.1 * buf[i];
    }
  }
  EXPECT_EQ(m.w.tensor().dtype(), DType::bf16);
  EXPECT_EQ(m.b.tensor().dtype(), DType::bf16);
  const auto got = kt::host_values(m.w.tensor());
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(got[i], p[i], 0.02 + 0.02 * std::fabs(p[i])) << i;
}

TEST(Optim, AdamWDefaultsAreTorchs) {
  const optim::AdamWOptions o;
  EXPECT_EQ(o.lr, 1e-3);
  EXPECT_EQ(o.beta1, 0.9);
  EXPECT_EQ(o.beta2, 0.999);
  EXPECT_EQ(o.eps, 1e-8);
  EXPECT_EQ(o.weight_decay, 1e-2);
}

TEST_P(OptimTest, DecayGroupsSplitByRankAndParametersWithoutGradientStay) {
  Two m(w0, b0, dev());
  const auto groups = optim::decay_groups(m, 0.3);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].params.size(), 1u);
  EXPECT_EQ(groups[0].params[0].slot(), m.w.slot());
  EXPECT_EQ(*groups[0].weight_decay, 0.3);
  EXPECT_EQ(*groups[1].weight_decay, 0.0);
  optim::AdamW opt(groups);
  EXPECT_EQ(*opt.param_groups()[1].lr, 1e-3);  // unset lr takes the optimizer's
  (m.w.tensor() * 2.0f).sum().backward();      // b gets no gradient
  opt.step();
  EXPECT_EQ(m.b.tensor().to_vector(), b0);
  EXPECT_NE(m.w.tensor().to_vector(), w0);
}

// clip_grad_norm returns the global norm and the next step scales the gradients by
// max_norm / (norm + 1e-6) when the norm is larger, by 1 otherwise.
TEST_P(OptimTest, ClipGradNormScalesTheNextStep) {
  for (double max_norm : {0.5, 1e3}) {
    Two m(w0, b0, dev());
    optim::SGD opt(m.parameters(), {.lr = 1.0});
    const auto cw = Tensor<2>::from_data(gw[0], {3, 4}, dev());
    const auto cb = Tensor<1>::from_data(gb[0], {4}, dev());
    ((m.w.tensor() * cw).sum() + (m.b.tensor() * cb).sum()).backward();
    double sq = 0;
    for (float g : gw[0]) sq += double(g) * g;
    for (float g : gb[0]) sq += double(g) * g;
    const double norm = std::sqrt(sq), coef = std::min(1.0, max_norm / (norm + 1e-6));
    const auto got = opt.clip_grad_norm(max_norm);
    EXPECT_NEAR(got.item(), norm, 1e-5 * norm);
    opt.step();
    std::vector<double> w(12), b(4);
    for (int i = 0; i < 12; ++i) w[i] = w0[i] - coef * gw[0][i];
    for (int i = 0; i < 4; ++i) b[i] = b0[i] - coef * gb[0][i];
    expect_params(m, w, b);
    // The coefficient is for one step only.
    opt.zero_grad();
    (m.b.tensor() * cb).sum().backward();
    const auto before = m.b.tensor().to_vector();
    opt.step();
    const auto after = m.b.tensor().to_vector();
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(after[i], before[i] - gb[0][i], 1e-5);
  }
  EXPECT_EQ(optim::grad_norm({}).item(), 0.0f);
}

TEST(Optim, WarmupCosineIsNanoGptsGetLr) {
  const optim::WarmupCosine s{
      .max_lr = 6e-4, .min_lr = 6e-5, .warmup_steps = 10, .decay_steps = 110};
  EXPECT_DOUBLE_EQ(s(0), 6e-4 / 10);
  EXPECT_DOUBLE_EQ(s(9), 6e-4);
  EXPECT_DOUBLE_EQ(s(10), 6e-4);
  EXPECT_NEAR(s(60), 6e-5 + 0.5 * (6e-4 - 6e-5), 1e-15);
  for (int k = 11; k < 110; ++k) EXPECT_LT(s(k), s(k - 1));
  EXPECT_DOUBLE_EQ(s(110), 6e-5);
  EXPECT_DOUBLE_EQ(s(1000), 6e-5);
  EXPECT_THROW(s(-1), kiln::ValueError);
  EXPECT_THROW((optim::WarmupCosine{1e-3, 1e-2, 1, 2}(0)), kiln::ValueError);
}

TEST(Optim, BadOptionsAreValueErrors) {
  Two m({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0}, kiln::Device::cpu());
  EXPECT_THROW(optim::SGD(m.parameters(), {.lr = -1}), kiln::ValueError);
  EXPECT_THROW(optim::SGD(m.parameters(), {.momentum = -0.1}), kiln::ValueError);
  EXPECT_THROW(optim::SGD(m.parameters(), {.nesterov = true}), kiln::ValueError);
  EXPECT_THROW(optim::SGD(m.parameters(), {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
               kiln::ValueError);
  EXPECT_THROW(optim::AdamW(m.parameters(), {.beta1 = 1.0}), kiln::ValueError);
  EXPECT_THROW(optim::AdamW(m.parameters(), {.eps = -1}), kiln::ValueError);
  EXPECT_THROW(optim::AdamW(m.parameters(), {.weight_decay = -1}), kiln::ValueError);
  std::vector<optim::ParamGroup> twice{{m.parameters(), {}, {}}, {m.parameters(), {}, {}}};
  EXPECT_THROW(optim::AdamW{twice}, kiln::ValueError);
  optim::AdamW ok(m.parameters());
  EXPECT_THROW(ok.clip_grad_norm(0), kiln::ValueError);
  EXPECT_THROW(ok.set_lr(-1), kiln::ValueError);
}

}  // namespace

#if KILN_WITH_FUSION
namespace {

// Each parameter's AdamW update (new value, m and v) is one fused kernel, and a new learning rate
// (a kernel scalar) compiles nothing new.
TEST(Optim, AdamWUpdateIsOneFusedKernelPerParameter) {
  kt::ConfigGuard guard;
  kiln::Config c = kiln::config();
  c.fusion = true;
  kiln::set_config(c);
  Two m(std::vector<float>(12, 0.5f), std::vector<float>(4, 0.25f), kiln::Device::cpu());
  optim::AdamW opt(optim::decay_groups(m, 0.1));
  for (int step = 0; step < 3; ++step) {
    ((m.w.tensor() * m.w.tensor()).sum() + m.b.tensor().sum()).backward();
    m.w.grad()->to_vector();  // backward's own kernels run here
    m.b.grad()->to_vector();
    opt.set_lr(1e-3 * (step + 1));
    const auto f0 = kiln::fusion_stats();
    opt.step();
    m.w.tensor().to_vector();
    m.b.tensor().to_vector();
    const auto f1 = kiln::fusion_stats();
    EXPECT_EQ(f1.groups_run - f0.groups_run, 2) << "step " << step;
    if (step == 2) {
      EXPECT_EQ(f1.plan_misses - f0.plan_misses, 0);
    }
    opt.zero_grad();
  }
}

}  // namespace
#endif

namespace {

// Twenty parameters of 1 to 40001 elements (more than one CUDA multi-tensor launch, sizes that are
// no multiple of its vectors or chunks) under AdamW with clipping and a scale_grads factor, three
// steps, against float64: the multi-tensor kernel where the device has one, the per-parameter
// expressions elsewhere.
struct Many : nn::Module {
  std::vector<nn::Parameter<1>> ps;
  Many(const std::vector<std::vector<float>>& init, kiln::Device d) {
    ps.reserve(init.size());  // registered parameters must not move
    for (std::size_t i = 0; i < init.size(); ++i) {
      ps.emplace_back(
          Tensor<1>::from_data(init[i], {static_cast<std::int64_t>(init[i].size())}, d));
      register_parameter("p" + std::to_string(i), ps.back());
    }
  }
};

TEST_P(OptimTest, AdamWOverManyParametersWithClippingAgainstFloat64) {
  const std::int64_t sizes[] = {1, 3, 16, 17, 768, 1000, 16385, 40001, 5, 2};
  std::vector<std::vector<float>> init;
  for (int i = 0; i < 20; ++i) init.push_back(kt::uniform(sizes[i % 10] + i, -1, 1, rng()));
  Many m(init, dev());
  const optim::AdamWOptions o{
      .lr = 0.05, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
  optim::AdamW opt(m.parameters(), o);
  std::vector<std::vector<double>> p, mo, v;
  for (const auto& x : init) {
    p.emplace_back(x.begin(), x.end());
    mo.emplace_back(x.size());
    v.emplace_back(x.size());
  }
  const double factor = 0.5, max_norm = 3.0;
  for (int k = 0; k < 3; ++k) {
    // Gradients c_i (known): the loss sum(p_i * c_i), scaled by 1 / factor.
    std::vector<std::vector<float>> cs;
    Tensor<0> loss = Tensor<0>::zeros({}, DType::f32, dev());
    for (std::size_t i = 0; i < m.ps.size(); ++i) {
      cs.push_back(kt::uniform(init[i].size(), -2, 2, rng()));
      const auto c =
          Tensor<1>::from_data(cs.back(), {static_cast<std::int64_t>(cs.back().size())}, dev());
      loss = loss + (m.ps[i].tensor() * c).sum() * static_cast<float>(1.0 / factor);
    }
    loss.backward();
    opt.scale_grads(factor);
    opt.clip_grad_norm(max_norm);
    opt.step();
    opt.zero_grad();
    double norm = 0;
    for (const auto& c : cs)
      for (float g : c) norm += double{g} * g;
    const double coef = std::min(max_norm / (std::sqrt(norm) + 1e-6), 1.0), t = k + 1;
    const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
    for (std::size_t i = 0; i < p.size(); ++i) {
      for (std::size_t j = 0; j < p[i].size(); ++j) {
        const double g = cs[i][j] * coef;
        p[i][j] *= 1 - o.lr * o.weight_decay;
        mo[i][j] = o.beta1 * mo[i][j] + (1 - o.beta1) * g;
        v[i][j] = o.beta2 * v[i][j] + (1 - o.beta2) * g * g;
        p[i][j] -= o.lr / bc1 * mo[i][j] / (std::sqrt(v[i][j]) / std::sqrt(bc2) + o.eps);
      }
    }
  }
  for (std::size_t i = 0; i < p.size(); ++i) {
    const auto got = kt::host_values(m.ps[i].tensor());
    ASSERT_EQ(got.size(), p[i].size());
    for (std::size_t j = 0; j < got.size(); ++j)
      ASSERT_NEAR(got[j], p[i][j], 2e-5 + 2e-5 * std::fabs(p[i][j])) << i << " " << j;
  }
}

}  // namespace
