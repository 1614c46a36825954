// ir::gradient: the gradient program of every element-wise op, run on the CPU evaluator (both
// kernel tables), against central differences of the op in float64 on fresh random inputs; the
// conventions at kinks and ties; programs with several uses, outputs and dtypes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "../test_support.hpp"
#include "cpu/cpu_evaluator.hpp"
#include "cpu/host_buffer.hpp"
#include "ir/derivative.hpp"
#include "kiln/half.hpp"

namespace {

using kiln::DType;
using kiln::detail::Handle;
using kiln::detail::TensorImpl;
using kiln::ir::Op;
using kiln::ir::Program;

Handle host(const std::vector<float>& v) {
  Handle t = kiln::cpu::host_empty({static_cast<std::int64_t>(v.size())}, DType::f32);
  std::memcpy(t->data(), v.data(), v.size() * sizeof(float));
  return t;
}

// Runs the gradient of `f` for every input, with upstream gradients `up` (one per output), and
// returns one vector per input.
std::vector<std::vector<float>> run_gradient(const Program& f, const std::vector<Handle>& in,
                                             const std::vector<double>& scalars,
                                             const std::vector<Handle>& up,
                                             const kiln::cpu::KernelTable& kernels) {
  const std::unique_ptr<bool[]> seeded(new bool[f.outputs.size()]),
      wanted(new bool[f.inputs.size()]);
  std::fill_n(seeded.get(), f.outputs.size(), true);
  std::fill_n(wanted.get(), f.inputs.size(), true);
  const kiln::ir::Gradient g =
      kiln::ir::gradient(f, {seeded.get(), f.outputs.size()}, {wanted.get(), f.inputs.size()});
  const std::int64_t n = in[0]->numel();
  std::vector<const TensorImpl*> ins;
  for (const Handle& h : in) ins.push_back(h.get());
  for (const Handle& h : up) ins.push_back(h.get());
  std::vector<double> all_scalars = scalars;
  all_scalars.insert(all_scalars.end(), g.constants.begin(), g.constants.end());
  std::vector<Handle> outs;
  std::vector<const TensorImpl*> out_ptrs;
  for (std::size_t o = 0; o < g.program.outputs.size(); ++o) {
    outs.push_back(kiln::cpu::host_empty({n}, g.program.dtype(g.program.outputs[o])));
    std::memset(outs.back()->data(), 0x7f, outs.back()->buffer->bytes());  // poison
    out_ptrs.push_back(outs.back().get());
  }
  kiln::ir::evaluate_cpu(g.program, ins, all_scalars, out_ptrs, kernels);
  std::vector<std::vector<float>> result;
  for (const Handle& h : outs) {
    std::vector<float> v(n);
    if (h->dtype == DType::f32) {
      std::memcpy(v.data(), h->data(), n * sizeof(float));
    } else {
      const auto* p = static_cast<const kiln::bfloat16*>(h->data());
      for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(p[i]);
    }
    result.push_back(std::move(v));
  }
  return result;
}

const kiln::cpu::KernelTable& table(int i) {
#if KILN_WITH_SIMD
  if (i == 1) return kiln::cpu::simd_kernels();
#endif
  (void)i;
  return kiln::cpu::scalar_kernels();
}

constexpr int kTables = KILN_WITH_SIMD ? 2 : 1;

double central_difference(const std::function<double(double)>& f, double x) {
  const double h = 1e-6 * std::max(1.0, std::fabs(x));
  return (f(x + h) - f(x - h)) / (2 * h);
}

struct UnaryCase {
  Op op;
  std::function<double(double)> f;
  double lo, hi;  // the sampled domain, away from kinks
};

double gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {Op::neg, [](double x) { return -x; }, -3, 3},
      {Op::abs, [](double x) { return std::fabs(x); }, 0.01, 3},
      {Op::relu, [](double x) { return x > 0 ? x : 0; }, 0.01, 3},
      {Op::sin, [](double x) { return std::sin(x); }, -4, 4},
      {Op::cos, [](double x) { return std::cos(x); }, -4, 4},
      {Op::tan, [](double x) { return std::tan(x); }, -1.2, 1.2},
      {Op::exp, [](double x) { return std::exp(x); }, -4, 4},
      {Op::log, [](double x) { return std::log(x); }, 0.05, 10},
      {Op::sqrt, [](double x) { return std::sqrt(x); }, 0.05, 10},
      {Op::rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.05, 10},
      {Op::tanh, [](double x) { return std::tanh(x); }, -4, 4},
      {Op::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8},
      {Op::gelu, gelu, -6, 6},
      {Op::silu, [](double x) { return x / (1 + std::exp(-x)); }, -8, 8},
      {Op::erf, [](double x) { return std::erf(x); }, -3, 3},
  };
  return cases;
}

// The f32 program rounds each of a handful of nodes (a few float ULPs); the reference is exact to
// about 1e-9. `scale` is the size of the terms the program adds or subtracts, times the upstream
// gradient: 1 - y^2 for tanh near |y| = 1 (PyTorch's formula too) loses the digits y's rounding
// held.
void expect_close(float got, double want, double scale, const std::string& what) {
  ASSERT_TRUE(std::isfinite(got)) << what;
  ASSERT_NEAR(got, want, 2e-5 * std::fabs(want) + 3e-7 * scale) << what;
}

class IrGradient : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { rng_.seed(seed_ = kt::fresh_seed()); }
  std::vector<float> uniform(std::size_t n, double lo, double hi) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(u(rng_));
    return v;
  }
  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

TEST_P(IrGradient, EveryUnaryOpAgainstCentralDifferences) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::size_t n = kiln::ir::kBlock + 33;
  for (const UnaryCase& c : unary_cases()) {
    Program p;
    p.output(p.unary(c.op, p.input(DType::f32)));
    std::vector<float> x = uniform(n, c.lo, c.hi), g = uniform(n, -2, 2);
    if (c.op == Op::abs || c.op == Op::relu)  // both signs, away from the kink
      for (std::size_t i = 0; i < n; i += 2) x[i] = -x[i];
    const auto dx = run_gradient(p, {host(x)}, {}, {host(g)}, table(GetParam()));
    ASSERT_EQ(dx.size(), 1u);
    for (std::size_t i = 0; i < n; ++i) {
      const double want = g[i] * central_difference(c.f, x[i]);
      expect_close(dx[0][i], want, std::fabs(g[i]),
                   std::string(kiln::ir::op_name(c.op)) + "'(" + std::to_string(x[i]) + ")");
    }
  }
}

TEST_P(IrGradient, EveryBinaryOpAgainstCentralDifferences) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  struct Case {
    Op op;
    std::function<double(double, double)> f;
    double lo, hi;
  };
  const Case cases[] = {
      {Op::add, [](double a, double b) { return a + b; }, -3, 3},
      {Op::sub, [](double a, double b) { return a - b; }, -3, 3},
      {Op::mul, [](double a, double b) { return a * b; }, -3, 3},
      {Op::div, [](double a, double b) { return a / b; }, 0.2, 3},
      {Op::pow, [](double a, double b) { return std::pow(a, b); }, 0.2, 3},
      {Op::minimum, [](double a, double b) { return std::min(a, b); }, -3, 3},
      {Op::maximum, [](double a, double b) { return std::max(a, b); }, -3, 3},
  };
  const std::size_t n = 2 * kiln::ir::kBlock + 5;
  for (const Case& c : cases) {
    Program p;
    const auto x = p.input(DType::f32), y = p.input(DType::f32);
    p.output(p.binary(c.op, x, y));
    std::vector<float> a = uniform(n, c.lo, c.hi), b = uniform(n, c.lo, c.hi);
    std::vector<float> g = uniform(n, -2, 2);
    const auto d = run_gradient(p, {host(a), host(b)}, {}, {host(g)}, table(GetParam()));
    ASSERT_EQ(d.size(), 2u);
    for (std::size_t i = 0; i < n; ++i) {
      // A tie, or so near one that the central difference's step straddles minimum's and
      // maximum's kink (seed 8002656588919114961 drew a pair 1 ULP apart):
      // KinksAndTiesFollowPyTorch holds ties.
      if (std::fabs(double(a[i]) - b[i]) <= 4e-6 * std::max(1.0, std::fabs(double(b[i])))) continue;
      const double da = g[i] * central_difference([&](double v) { return c.f(v, b[i]); }, a[i]);
      const double db = g[i] * central_difference([&](double v) { return c.f(a[i], v); }, b[i]);
      const std::string at = std::string(kiln::ir::op_name(c.op)) + " at (" + std::to_string(a[i]) +
                             ", " + std::to_string(b[i]) + ")";
      expect_close(d[0][i], da, std::fabs(g[i]), "d/da " + at);
      expect_close(d[1][i], db, std::fabs(g[i]), "d/db " + at);
    }
  }
}

TEST_P(IrGradient, KinksAndTiesFollowPyTorch) {
  auto one = [&](Op op, float a, float b, bool binary) {
    Program p;
    const auto x = p.input(DType::f32);
    p.output(binary ? p.binary(op, x, p.input(DType::f32)) : p.unary(op, x));
    std::vector<Handle> in{host({a})};
    if (binary) in.push_back(host({b}));
    return run_gradient(p, in, {}, {host({3.0f})}, table(GetParam()));
  };
  EXPECT_EQ(one(Op::abs, 0.0f, 0, false)[0][0], 0.0f);
  EXPECT_EQ(one(Op::relu, 0.0f, 0, false)[0][0], 0.0f);
  for (Op op : {Op::minimum, Op::maximum}) {
    const auto d = one(op, 1.5f, 1.5f, true);
    EXPECT_EQ(d[0][0], 1.5f) << kiln::ir::op_name(op);
    EXPECT_EQ(d[1][0], 1.5f) << kiln::ir::op_name(op);
  }
  // pow: d/dx is 0 where the exponent is 0 (x^0 = 1 everywhere); d/dy is 0 at x = 0, y >= 0.
  auto d = one(Op::pow, 0.0f, 0.0f, true);
  EXPECT_EQ(d[0][0], 0.0f);
  EXPECT_EQ(d[1][0], 0.0f);
  d = one(Op::pow, 0.0f, 2.0f, true);
  EXPECT_EQ(d[0][0], 0.0f);
  EXPECT_EQ(d[1][0], 0.0f);
  d = one(Op::pow, 2.0f, 3.0f, true);
  EXPECT_NEAR(d[0][0], 3 * 3 * 4, 1e-4);
  EXPECT_NEAR(d[1][0], 3 * 8 * std::log(2.0), 1e-4);
}

// y = sin(x) * w + exp(x * s), z = where(x > w, x, w * w): x read four times, two outputs, a
// scalar, and both where branches.
TEST_P(IrGradient, SharedNodesSeveralOutputsAndWhere) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  Program p;
  const auto x = p.input(DType::f32), w = p.input(DType::f32), s = p.scalar(DType::f32);
  p.output(p.binary(Op::add, p.binary(Op::mul, p.unary(Op::sin, x), w),
                    p.unary(Op::exp, p.binary(Op::mul, x, s))));
  p.output(p.where(p.binary(Op::gt, x, w), x, p.binary(Op::mul, w, w)));
  const std::size_t n = 1000;
  std::vector<float> xv = uniform(n, -2, 2), wv = uniform(n, -2, 2), gy = uniform(n, -1, 1),
                     gz = uniform(n, -1, 1);
  const double sv = 0.75;
  const auto d =
      run_gradient(p, {host(xv), host(wv)}, {sv}, {host(gy), host(gz)}, table(GetParam()));
  for (std::size_t i = 0; i < n; ++i) {
    const double X = xv[i], W = wv[i];
    const bool take_x = X > W;
    const double dx = gy[i] * (std::cos(X) * W + sv * std::exp(X * sv)) + (take_x ? gz[i] : 0);
    const double dw = gy[i] * std::sin(X) + (take_x ? 0 : gz[i] * 2 * W);
    expect_close(d[0][i], dx, 4, "dx at " + std::to_string(i));
    expect_close(d[1][i], dw, 4, "dw at " + std::to_string(i));
  }
}

// A bf16 input computed in f32 (as the front end builds half programs): its gradient comes
// back in bf16; an i32 input of the same program gets none.
TEST_P(IrGradient, HalfInputsGetHalfGradientsAndIntegersNone) {
  Program p;
  const auto x = p.cast(p.input(DType::bf16), DType::f32);
  const auto k = p.cast(p.input(DType::i32), DType::f32);
  p.output(p.cast(p.binary(Op::mul, p.unary(Op::exp, x), k), DType::bf16));
  const bool seeded[] = {true}, wanted[] = {true, true};
  const kiln::ir::Gradient g = kiln::ir::gradient(p, seeded, wanted);
  ASSERT_EQ(g.inputs, std::vector<int>{0});
  ASSERT_EQ(g.program.outputs.size(), 1u);
  EXPECT_EQ(g.program.dtype(g.program.outputs[0]), DType::bf16);
  EXPECT_EQ(g.program.inputs.size(), 3u);  // x, k, and the upstream gradient (bf16)
  EXPECT_EQ(g.program.inputs[2], DType::bf16);
}

// A half value cast to f32 and back is the value itself: the round trip adds no node, so a
// half sum's gradient passes the upstream gradient through as it is (autodiff then shares its
// buffer instead of writing a copy); a narrowing round trip keeps both casts.
TEST(IrCast, HalfRoundTripThroughF32IsTheValue) {
  Program p;
  const auto h = p.input(DType::bf16);
  EXPECT_EQ(p.cast(p.cast(h, DType::f32), DType::bf16), h);
  const auto f = p.input(DType::f32);
  EXPECT_NE(p.cast(p.cast(f, DType::bf16), DType::f32), f);
  EXPECT_NE(p.cast(p.cast(h, DType::f32), DType::f16), h);
  Program sum;
  const auto a = sum.cast(sum.input(DType::bf16), DType::f32);
  const auto b = sum.cast(sum.input(DType::bf16), DType::f32);
  sum.output(sum.cast(sum.binary(Op::add, a, b), DType::bf16));
  const bool seeded[] = {true}, wanted[] = {true, true};
  const kiln::ir::Gradient g = kiln::ir::gradient(sum, seeded, wanted);
  ASSERT_EQ(g.program.outputs.size(), 2u);
  for (auto o : g.program.outputs) EXPECT_EQ(g.program.nodes[o].op, Op::input);
}

TEST(IrGradientErrors, SpanSizesMustMatchTheProgram) {
  Program p;
  p.output(p.unary(Op::exp, p.input(DType::f32)));
  const bool one[] = {true}, two[] = {true, true};
  EXPECT_THROW(kiln::ir::gradient(p, two, one), kiln::ValueError);
  EXPECT_THROW(kiln::ir::gradient(p, one, two), kiln::ValueError);
}

// An input nothing reads, or one whose output is not seeded, gets a zero gradient.
TEST_P(IrGradient, UnreadAndUnseededGiveZero) {
  Program p;
  const auto x = p.input(DType::f32);
  p.input(DType::f32);  // unread
  p.output(p.unary(Op::exp, x));
  p.output(p.unary(Op::sin, x));
  const bool seeded[] = {false, true}, wanted[] = {true, true};
  const kiln::ir::Gradient g = kiln::ir::gradient(p, seeded, wanted);
  ASSERT_EQ(g.inputs, (std::vector<int>{0, 1}));
  Handle xv = host({0.5f, -1.0f}), yv = host({7.0f, 7.0f}), up = host({2.0f, -3.0f});
  Handle o0 = kiln::cpu::host_empty({2}, DType::f32), o1 = kiln::cpu::host_empty({2}, DType::f32);
  const TensorImpl* ins[] = {xv.get(), yv.get(), up.get()};
  const TensorImpl* outs[] = {o0.get(), o1.get()};
  kiln::ir::evaluate_cpu(g.program, ins, g.constants, outs, table(GetParam()));
  const auto* d0 = static_cast<const float*>(o0->data());
  const auto* d1 = static_cast<const float*>(o1->data());
  EXPECT_NEAR(d0[0], 2 * std::cos(0.5), 1e-6);
  EXPECT_NEAR(d0[1], -3 * std::cos(-1.0), 1e-6);
  EXPECT_EQ(d1[0], 0.0f);
  EXPECT_EQ(d1[1], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Tables, IrGradient, ::testing::Range(0, kTables),
                         [](const auto& info) { return info.param ? "simd" : "scalar"; });

}  // namespace
