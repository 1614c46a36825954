// kiln::Autocast (kiln/autocast.hpp), on every device present: matmul, nn::Linear and attention
// give bf16 under the guard and match a float64 evaluation of the bf16-rounded inputs; the f32
// list (softmax, log_softmax, layer_norm, rms_norm, the losses, sum, mean, exp, log) gives f32;
// nothing changes outside the guard; nesting, switching off and f16; gradients of f32 parameters
// arrive in f32 and match float64; a checkpointed region replays under forward's state; a small
// GPT-2 trains under the guard; the state is per thread; an unsupported dtype is a ValueError.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <thread>
#include <utility>

#include "kiln/half.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/nn/gpt2.hpp"
#include "kiln/optim.hpp"
#include "test_support.hpp"
#include "tiny_gpt2.hpp"

namespace {

using kiln::Autocast;
using kiln::DType;
using kiln::Tensor;
namespace nn = kiln::nn;

class AutocastTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(AutocastTest);

double bf16(double x) { return float(kiln::bfloat16(static_cast<float>(x))); }

std::vector<double> rounded(const std::vector<float>& v) {
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = bf16(v[i]);
  return r;
}

// bf16 keeps 8 significant bits: a result rounded once or twice is within 2^-7 of the magnitude
// its terms add up to.
constexpr double kBf16 = 1.0 / 128;

// x [m, k] (W [n, k])^T + b in float64, with the sum of |terms| per element for the tolerance.
struct Product {
  std::vector<double> value, magnitude;
};
Product linear_reference(const std::vector<double>& x, const std::vector<double>& w,
                         const std::vector<double>& b, int m, int k, int n) {
  Product p{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = b.empty() ? 0 : b[j], a = b.empty() ? 0 : std::abs(b[j]);
      for (int c = 0; c < k; ++c) {
        s += x[i * k + c] * w[j * k + c];
        a += std::abs(x[i * k + c] * w[j * k + c]);
      }
      p.value[i * n + j] = s;
      p.magnitude[i * n + j] = a;
    }
  return p;
}

TEST_P(AutocastTest, LinearAndMatmulRunInBf16) {
  const int m = 6, k = 19, n = 5;
  nn::Linear lin(k, n);
  lin.to(dev());
  const auto xs = kt::uniform(m * k, -2, 2, rng());
  const auto x = Tensor<2>::from_data(xs, {m, k}, dev());
  const auto ws = lin.weight.tensor().to_vector(), bs = lin.bias.tensor().to_vector();
  const Product want = linear_reference(rounded(xs), rounded(ws), rounded(bs), m, k, n);
  Tensor<2> y, product;
  {
    const Autocast on(DType::bf16);
    EXPECT_EQ(kiln::autocast_dtype(), DType::bf16);
    y = lin(x);
    product = kiln::matmul(x, lin.weight.tensor().transpose(0, 1));
  }
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(product.dtype(), DType::bf16);
  const auto got = y.to_vector(), got_product = product.to_vector();
  const Product want_product = linear_reference(rounded(xs), rounded(ws), {}, m, k, n);
  for (int i = 0; i < m * n; ++i) {
    EXPECT_NEAR(got[i], want.value[i], kBf16 * want.magnitude[i] + 1e-6) << i;
    EXPECT_NEAR(got_product[i], want_product.value[i], kBf16 * want_product.magnitude[i] + 1e-6)
        << i;
  }
  // Batched rank 3 with operands of two floating dtypes: both are cast, the product is bf16.
  const auto as = kt::uniform(2 * 3 * 4, -1, 1, rng()), bs2 = kt::uniform(4 * 2, -1, 1, rng());
  const auto a = Tensor<3>::from_data(as, {2, 3, 4}, dev());
  const auto b = Tensor<2>::from_data(bs2, {4, 2}, dev()).to(DType::f16);
  const Autocast on(DType::bf16);
  const auto ab = kiln::matmul(a, b);
  EXPECT_EQ(ab.dtype(), DType::bf16);
  const auto got_ab = ab.to_vector();
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 2; ++j) {
      double s = 0, mag = 0;
      for (int c = 0; c < 4; ++c) {
        const double t = bf16(as[i * 4 + c]) * bf16(float(kiln::float16(bs2[c * 2 + j])));
        s += t, mag += std::abs(t);
      }
      EXPECT_NEAR(got_ab[i * 2 + j], s, kBf16 * mag + 1e-6);
    }
}

TEST_P(AutocastTest, AttentionRunsInBf16) {
  const int bh = 2, t = 5, d = 8;
  const auto qs = kt::uniform(bh * t * d, -1, 1, rng()), ks = kt::uniform(bh * t * d, -1, 1, rng()),
             vs = kt::uniform(bh * t * d, -1, 1, rng());
  auto tensor = [&](const std::vector<float>& v) {
    return Tensor<4>::from_data(v, {1, bh, t, d}, dev());
  };
  Tensor<4> out;
  {
    const Autocast on(DType::bf16);
    out = kiln::scaled_dot_product_attention(tensor(qs), tensor(ks), tensor(vs), true);
  }
  EXPECT_EQ(out.dtype(), DType::bf16);
  const auto got = out.to_vector();
  const auto q = rounded(qs), k = rounded(ks), v = rounded(vs);
  for (int n = 0; n < bh; ++n)
    for (int i = 0; i < t; ++i) {
      std::vector<double> p(i + 1);
      double z = 0;
      for (int j = 0; j <= i; ++j) {
        double s = 0;
        for (int c = 0; c < d; ++c) s += q[(n * t + i) * d + c] * k[(n * t + j) * d + c];
        z += p[j] = std::exp(s / std::sqrt(double(d)));
      }
      for (int c = 0; c < d; ++c) {
        double o = 0;
        for (int j = 0; j <= i; ++j) o += p[j] / z * v[(n * t + j) * d + c];
        // Scores of at most sqrt(8) are rounded to bf16 before softmax: a few 2^-8 of |v| <= 1.
        EXPECT_NEAR(got[(n * t + i) * d + c], o, 4 * kBf16) << n << " " << i << " " << c;
      }
    }
}

TEST_P(AutocastTest, NothingChangesOutsideTheGuard) {
  EXPECT_EQ(kiln::autocast_dtype(), std::nullopt);
  const auto xs = kt::uniform(4 * 3, -1, 1, rng()), ws = kt::uniform(3 * 2, -1, 1, rng());
  const auto x = Tensor<2>::from_data(xs, {4, 3}, dev()),
             w = Tensor<2>::from_data(ws, {3, 2}, dev());
  const auto y = kiln::matmul(x, w);
  EXPECT_EQ(y.dtype(), DType::f32);
  const auto got = y.to_vector();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) {
      double s = 0;
      for (int c = 0; c < 3; ++c) s += double(xs[i * 3 + c]) * ws[c * 2 + j];
      EXPECT_NEAR(got[i * 2 + j], s, 1e-5);
    }
  // Operands of different dtypes stay an error, and a bf16 softmax stays bf16.
  EXPECT_THROW(kiln::matmul(x.to(DType::bf16), w), kiln::DTypeError);
  EXPECT_EQ(x.to(DType::bf16).softmax(1).dtype(), DType::bf16);
  EXPECT_EQ(x.to(DType::bf16).sum().dtype(), DType::bf16);
  { const Autocast on(DType::bf16); }
  EXPECT_EQ(kiln::autocast_dtype(), std::nullopt);
  EXPECT_EQ(kiln::matmul(x, w).dtype(), DType::f32);
}

TEST_P(AutocastTest, NestsSwitchesOffAndTakesF16) {
  const auto x = Tensor<2>::random({3, 4}, kiln::Distribution::uniform(-1, 1), dev(), seed());
  const auto w = Tensor<2>::random({4, 2}, kiln::Distribution::uniform(-1, 1), dev(), seed() + 1);
  {
    const Autocast bf(DType::bf16);
    EXPECT_EQ(kiln::matmul(x, w).dtype(), DType::bf16);
    {
      const Autocast off(std::nullopt);
      EXPECT_EQ(kiln::autocast_dtype(), std::nullopt);
      EXPECT_EQ(kiln::matmul(x, w).dtype(), DType::f32);
      {
        const Autocast f16(DType::f16);
        const auto y = kiln::matmul(x, w);
        EXPECT_EQ(y.dtype(), DType::f16);
        EXPECT_EQ(y.softmax(1).dtype(), DType::f32);  // the f32 list holds for f16 too
      }
      EXPECT_EQ(kiln::autocast_dtype(), std::nullopt);
    }
    EXPECT_EQ(kiln::autocast_dtype(), DType::bf16);
    EXPECT_EQ(kiln::matmul(x, w).dtype(), DType::bf16);
  }
  EXPECT_EQ(kiln::autocast_dtype(), std::nullopt);
}

TEST(Autocast, OnlyHalfDtypesAreAccepted) {
  for (DType t : {DType::i32, DType::f32, DType::boolean}) {
    SCOPED_TRACE(kiln::dtype_name(t));
    EXPECT_THROW(Autocast guard(t), kiln::ValueError);
    EXPECT_EQ(kiln::autocast_dtype(), std::nullopt);  // a refused guard changed nothing
  }
  const Autocast on(DType::bf16);
  EXPECT_THROW(Autocast inner(DType::i32), kiln::ValueError);
  EXPECT_EQ(kiln::autocast_dtype(), DType::bf16);
  // Under the guard the ops' own checks still hold: an i32 product is not cast and stays i32.
  const auto i = kiln::from_data({1, 2, 3, 4}, {2, 2});
  EXPECT_THROW(kiln::matmul(i, Tensor<2>::ones({2, 2})), kiln::DTypeError);
  EXPECT_THROW(nn::Linear(2, 2)(i), kiln::DTypeError);
}

TEST_P(AutocastTest, F32ListComputesInF32) {
  const int rows = 4, cols = 9;
  const auto xs = kt::uniform(rows * cols, -4, 4, rng());
  const auto x = Tensor<2>::from_data(xs, {rows, cols}, dev()).to(DType::bf16);
  const auto xr = rounded(xs);  // x's values, exactly
  const auto ws = kt::uniform(cols, 0.5, 1.5, rng()), bs = kt::uniform(cols, -1, 1, rng());
  const auto w = Tensor<1>::from_data(ws, {cols}, dev()),
             b = Tensor<1>::from_data(bs, {cols}, dev());
  const auto targets = Tensor<1>::from_data(kt::ints(rows, 0, cols - 1, rng()), {rows}, dev());
  const auto ts = targets.to_vector<std::int32_t>();
  const Autocast on(DType::bf16);
  const auto sm = x.softmax(1), lsm0 = x.log_softmax(0), ln = kiln::layer_norm(x, w, b);
  const auto rms = kiln::rms_norm(x, w), ex = x.exp(), lg = x.abs().log();
  const auto ce = kiln::cross_entropy(x, targets), total = x.sum();
  const auto avg = x.mean(1);
  const auto mse = kiln::mse_loss(x, Tensor<2>::zeros({rows, cols}, DType::bf16, dev()));
  for (DType t : {sm.dtype(), lsm0.dtype(), ln.dtype(), rms.dtype(), ce.dtype(), total.dtype(),
                  avg.dtype(), ex.dtype(), lg.dtype(), mse.dtype()})
    EXPECT_EQ(t, DType::f32);
  // Not on a list: kept in x's dtype; beside f32, promoted to f32.
  EXPECT_EQ(x.relu().dtype(), DType::bf16);
  EXPECT_EQ(x.max().dtype(), DType::bf16);
  EXPECT_EQ((x + Tensor<2>::ones({rows, cols}, DType::f32, dev())).dtype(), DType::f32);
  // The values are f32 computations of the bf16 inputs: f32 accuracy against float64.
  const auto gsm = sm.to_vector(), gln = ln.to_vector(), grms = rms.to_vector();
  double loss = 0, sum = 0, sq = 0;
  for (int r = 0; r < rows; ++r) {
    const double* v = &xr[r * cols];
    double mx = v[0], z = 0, mean = 0, var = 0, ms = 0;
    for (int c = 0; c < cols; ++c) mx = std::max(mx, v[c]), mean += v[c] / cols, ms += v[c] * v[c];
    for (int c = 0; c < cols; ++c) z += std::exp(v[c] - mx), var += (v[c] - mean) * (v[c] - mean);
    var /= cols, ms /= cols;
    for (int c = 0; c < cols; ++c) {
      const int i = r * cols + c;
      EXPECT_NEAR(gsm[i], std::exp(v[c] - mx) / z, 1e-6) << i;
      EXPECT_NEAR(gln[i], (v[c] - mean) / std::sqrt(var + 1e-5) * ws[c] + bs[c], 1e-4) << i;
      EXPECT_NEAR(grms[i], v[c] / std::sqrt(ms + 1e-6) * ws[c], 1e-4) << i;
      sum += v[c], sq += v[c] * v[c];
    }
    loss -= (v[ts[r]] - mx - std::log(z)) / rows;
  }
  EXPECT_NEAR(ce.item(), loss, 1e-5);
  EXPECT_NEAR(total.item(), sum, 1e-4);
  EXPECT_NEAR(mse.item(), sq / (rows * cols), 1e-4);
}

// The cast autocast puts before a product is an element-wise op like any other: on a fused device
// it joins the group that computes its operand, exactly as the same cast written by hand, and
// runs no more groups than the f32 product.
TEST_P(AutocastTest, CastsFuseIntoTheirProducers) {
  kt::ConfigGuard guard;
  kiln::Config c = kiln::config();
  c.fusion = true;
  kiln::set_config(c);
  const auto x = Tensor<2>::random({16, 8}, kiln::Distribution::uniform(-1, 1), dev(), seed());
  const auto w = Tensor<2>::random({8, 4}, kiln::Distribution::uniform(-1, 1), dev(), seed() + 1);
  const auto w16 = w.to(DType::bf16);  // already bf16: only the left operand is cast
  auto work = [&](auto&& product) {
    const auto before = kiln::fusion_stats();
    product().to_vector();
    const auto after = kiln::fusion_stats();
    return std::pair{after.groups_run - before.groups_run,
                     after.ops_recorded - before.ops_recorded};
  };
  auto h = [&] { return (x * 2.0f + 1.0f).tanh(); };
  const auto f32 = work([&] { return kiln::matmul(h(), w); });
  const auto by_hand = work([&] { return kiln::matmul(h().to(DType::bf16), w16); });
  const auto autocast = work([&] {
    const Autocast on(DType::bf16);
    return kiln::matmul(h(), w16);
  });
  EXPECT_EQ(autocast, by_hand);
  EXPECT_EQ(autocast.first, f32.first);
}

// y = Linear(x) under bf16 autocast, loss = sum(y * c) in f32: dL/dW = c^T x, dL/db = sum_rows c,
// dL/dx = c W, each from the bf16-rounded values.
TEST_P(AutocastTest, GradientsOfF32ParametersAreF32) {
  const int m = 5, k = 7, n = 3;
  nn::Linear lin(k, n);
  lin.to(dev());
  const auto xs = kt::uniform(m * k, -1, 1, rng()), cs = kt::uniform(m * n, -1, 1, rng());
  const auto x = Tensor<2>::from_data(xs, {m, k}, dev()).requires_grad(true);
  const auto c = Tensor<2>::from_data(cs, {m, n}, dev());
  {
    const Autocast on(DType::bf16);
    const auto y = lin(x);
    ASSERT_EQ(y.dtype(), DType::bf16);
    const auto loss = (y * c).sum();
    ASSERT_EQ(loss.dtype(), DType::f32);
    loss.backward();
  }
  ASSERT_TRUE(lin.weight.grad() && lin.bias.grad() && x.grad());
  EXPECT_EQ(lin.weight.dtype(), DType::f32);
  EXPECT_EQ(lin.weight.grad()->dtype(), DType::f32);
  EXPECT_EQ(lin.bias.grad()->dtype(), DType::f32);
  EXPECT_EQ(x.grad()->dtype(), DType::f32);
  const auto gw = lin.weight.grad()->to_vector(), gb = lin.bias.grad()->to_vector(),
             gx = x.grad()->to_vector();
  const auto xr = rounded(xs), cr = rounded(cs), wr = rounded(lin.weight.tensor().to_vector());
  for (int j = 0; j < n; ++j) {
    double b = 0, bm = 0;
    for (int i = 0; i < m; ++i) b += cr[i * n + j], bm += std::abs(cr[i * n + j]);
    EXPECT_NEAR(gb[j], b, kBf16 * bm + 1e-6) << j;
    for (int q = 0; q < k; ++q) {
      double s = 0, mag = 0;
      for (int i = 0; i < m; ++i)
        s += cr[i * n + j] * xr[i * k + q], mag += std::abs(cr[i * n + j] * xr[i * k + q]);
      EXPECT_NEAR(gw[j * k + q], s, kBf16 * mag + 1e-6) << j << " " << q;
    }
  }
  for (int i = 0; i < m; ++i)
    for (int q = 0; q < k; ++q) {
      double s = 0, mag = 0;
      for (int j = 0; j < n; ++j)
        s += cr[i * n + j] * wr[j * k + q], mag += std::abs(cr[i * n + j] * wr[j * k + q]);
      EXPECT_NEAR(gx[i * k + q], s, kBf16 * mag + 1e-6) << i << " " << q;
    }
}

// backward of a checkpointed region runs after the guard is gone; the replay runs under the state
// forward saw, so the gradient is the one without checkpointing.
TEST_P(AutocastTest, CheckpointReplaysUnderForwardsState) {
  const auto w = Tensor<2>::random({6, 4}, kiln::Distribution::uniform(-1, 1), dev(), seed())
                     .requires_grad(true);
  const auto x = Tensor<2>::random({3, 6}, kiln::Distribution::uniform(-1, 1), dev(), seed() + 1)
                     .requires_grad(true);
  const std::function<Tensor<2>(const std::vector<Tensor<2>>&)> region =
      [&](const std::vector<Tensor<2>>& in) { return kiln::matmul(in[0], w).exp(); };
  Tensor<0> plain, checkpointed;
  {
    const Autocast on(DType::bf16);
    plain = region({x}).sum();
    checkpointed = kiln::checkpoint(region, std::vector{x}).sum();
  }
  plain.backward();
  const auto want = w.grad()->to_vector();
  w.zero_grad();
  checkpointed.backward();
  // The same ops in the same dtypes: equal up to f32 rounding (the replay may group its
  // element-wise work differently); in f32 instead of bf16 it would differ by about 2^-8.
  const auto got = w.grad()->to_vector();
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i]) + 1e-6) << i;
}

TEST(Autocast, StateIsPerThread) {
  const Autocast on(DType::bf16);
  std::optional<DType> seen = DType::f16;
  DType product = DType::boolean;
  std::thread other([&] {
    seen = kiln::autocast_dtype();
    product = kiln::matmul(Tensor<2>::ones({2, 2}), Tensor<2>::ones({2, 2})).dtype();
    const Autocast there(DType::f16);  // and a guard there leaves this thread alone
  });
  other.join();
  EXPECT_EQ(seen, std::nullopt);
  EXPECT_EQ(product, DType::f32);
  EXPECT_EQ(kiln::autocast_dtype(), DType::bf16);
}

// A 2-layer GPT-2 whose forward runs under the guard: bf16 logits, an f32 loss that falls over
// AdamW steps, f32 parameters and gradients throughout.
TEST_P(AutocastTest, Gpt2TrainsUnderAutocast) {
  nn::manual_seed(seed());
  nn::GPT2 model(kiln_test::kTinyGpt2);
  model.to(dev());
  const auto [ids, targets] = kiln_test::tiny_gpt2_batch(7, 3, dev());
  kiln::optim::AdamW opt(kiln::optim::decay_groups(model, 0.1), {.lr = 1e-2});
  float first = 0, last = 0;
  for (int step = 0; step < 15; ++step) {
    Tensor<0> loss;
    {
      const Autocast on(DType::bf16);
      if (step == 0) {
        EXPECT_EQ(model.forward(ids).dtype(), DType::bf16);
      }
      loss = model.loss(ids, targets);
    }
    EXPECT_EQ(loss.dtype(), DType::f32);
    loss.backward();
    for (const auto& [name, p] : model.named_parameters()) {
      EXPECT_EQ(p.dtype(), DType::f32) << name;
      const auto g = kiln::detail::grad(p.handle());
      ASSERT_TRUE(g) << name;
      EXPECT_EQ(kiln::detail::dtype(g), DType::f32) << name;
    }
    opt.clip_grad_norm(1.0);
    opt.step();
    opt.zero_grad();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_NEAR(first, std::log(64.0), 0.5);
  EXPECT_LT(last, 0.5f * first) << "from " << first;
}

}  // namespace
