// Element-wise ops against a float64 reference: every unary and binary op over every layout,
// the whole finite range, NaN and ±Inf, broadcasting, scalars on either side, dtype promotion,
// comparisons, where and casts.
#include <cmath>
#include <limits>

#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using kt::Ref;
using kt::Tol;

class ElementwiseTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(ElementwiseTest);

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
using kt::kMath;

// The float a op b, as IEEE computes it (exact for + - * /).
template <class F>
auto in_float(F f) {
  return [f](double a, double b) {
    return static_cast<double>(f(static_cast<float>(a), static_cast<float>(b)));
  };
}
double nan_min(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
}
double nan_max(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
}

// Calls v(name, kiln op, float64 reference, tolerance, lo, hi) for every unary op; [lo, hi)
// is a typical argument range for the layout tests (the range tests cover everything).
template <class V>
void for_each_unary(V&& v) {
#define UNARY(name, op, ref, tol, lo, hi) \
  v(                                      \
      name, [](const auto& x) { return op; }, [](double x) { return ref; }, tol, lo, hi)
  UNARY("neg", x.neg(), -x, kt::kExact, -10, 10);
  UNARY("operator-", -x, -x, kt::kExact, -10, 10);
  UNARY("abs", x.abs(), std::fabs(x), kt::kExact, -10, 10);
  UNARY("sin", x.sin(), std::sin(x), kMath, -10, 10);
  UNARY("cos", x.cos(), std::cos(x), kMath, -10, 10);
  UNARY("tan", x.tan(), std::tan(x), kMath, -1.5, 1.5);
  UNARY("exp", x.exp(), std::exp(x), kMath, -20, 20);
  UNARY("log", x.log(), std::log(x), kMath, 1e-3, 100);
  UNARY("sqrt", x.sqrt(), std::sqrt(x), kt::kExact, 0, 100);
  UNARY("rsqrt", x.rsqrt(), 1 / std::sqrt(x), kMath, 1e-3, 100);
  UNARY("tanh", x.tanh(), std::tanh(x), kMath, -5, 5);
  UNARY("sigmoid", x.sigmoid(), 1 / (1 + std::exp(-x)), kMath, -10, 10);
  UNARY("relu", x.relu(), std::isnan(x) || x > 0 ? x : 0.0, kt::kExact, -5, 5);
  // The exact erf form, written with erfc so that the negative tail keeps its digits; at -inf
  // its limit, -0 (0.5 * x * (1 + erf(x / sqrt 2)) would give NaN there).
  UNARY("gelu", x.gelu(), x == -kInf ? -0.0 : 0.5 * x * std::erfc(-x / std::sqrt(2.0)), kMath, -5,
        5);
  UNARY("silu", x.silu(), x / (1 + std::exp(-x)), kMath, -10, 10);
  UNARY("erf", x.erf(), std::erf(x), kMath, -4, 4);
  UNARY("clamp(-0.5, 0.75)", x.clamp(-0.5, 0.75), std::isnan(x) ? x : std::clamp(x, -0.5, 0.75),
        kt::kExact, -2, 2);
#undef UNARY
  // The exponent is a scalar parameter, which an f32 tensor takes as a float (as PyTorch).
  for (double e : {2.0, 3.0, 0.5, -1.0, -2.0, 2.5, 0.0, 1.0 / 3}) {
    auto name = "pow(" + std::to_string(e) + ")";
    auto op = [e](const auto& x) { return x.pow(e); };
    auto ref = [ef = double(float(e))](double x) { return std::pow(x, ef); };
    v(name.c_str(), op, ref, kMath, -3, 3);
  }
}

TEST_P(ElementwiseTest, UnaryOverLayouts) {
  for_each_unary([&](const char* name, auto op, auto ref, Tol tol, double lo, double hi) {
    SCOPED_TRACE(name);
    for (const auto& l : kt::layouts()) {
      SCOPED_TRACE(l.name);
      auto in =
          kt::make_input(l, dev(), [&](std::size_t n) { return kt::uniform(n, lo, hi, rng()); });
      auto y = op(in.t);
      EXPECT_EQ(y.dtype(), DType::f32);
      EXPECT_TRUE(kt::matches(y, in.r.map(ref), tol));
    }
    float v = kt::uniform(1, lo, hi, rng())[0];
    auto y0 = op(Tensor<0>::full({}, v, DType::f32, dev()));
    EXPECT_TRUE(kt::matches(y0, Ref::scalar(v).map(ref), tol)) << "rank 0";
  });
}

// Over the whole finite range, the subnormals, and NaN and ±Inf: the bound holds everywhere.
TEST_P(ElementwiseTest, UnaryWholeRangeAndSpecials) {
  auto data = kt::wide_floats(4096, rng());
  for (float s : {kInf, -kInf, kNaN}) data.push_back(s);
  const auto n = static_cast<std::int64_t>(data.size());
  auto x = Tensor<1>::from_data(data, {n}, dev());
  auto r = Ref::of(data, {n});
  for_each_unary([&](const char* name, auto op, auto ref, Tol tol, double, double) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(kt::matches(op(x), r.map(ref), tol));
  });
}

// Calls v(name, kiln op, reference) for every arithmetic binary op and every comparison.
#define BINARY(name, op, ref) \
  v(                          \
      name, [](const auto& a, const auto& b) { return op; }, ref)
template <class V>
void for_each_binary(V&& v) {
  BINARY("add", a + b, in_float(std::plus<float>()));
  BINARY("sub", a - b, in_float(std::minus<float>()));
  BINARY("mul", a * b, in_float(std::multiplies<float>()));
  BINARY("div", a / b, in_float(std::divides<float>()));
  BINARY("minimum", kiln::minimum(a, b), nan_min);
  BINARY("maximum", kiln::maximum(a, b), nan_max);
}
template <class V>
void for_each_comparison(V&& v) {
  BINARY("eq", a == b, std::equal_to<double>());
  BINARY("ne", a != b, std::not_equal_to<double>());
  BINARY("lt", a < b, std::less<double>());
  BINARY("le", a <= b, std::less_equal<double>());
  BINARY("gt", a > b, std::greater<double>());
  BINARY("ge", a >= b, std::greater_equal<double>());
}
#undef BINARY

// Every pair of same-shape layouts, so that each side is contiguous, strided and broadcast.
TEST_P(ElementwiseTest, BinaryOverLayoutPairs) {
  auto gen = [&](std::size_t n) {
    auto v = kt::uniform(n, -4, 4, rng());
    for (std::size_t i = 0; i < n; i += 5) v[i] = std::round(v[i]);  // ties for comparisons
    return v;
  };
  for (const auto& la : kt::layouts()) {
    for (const auto& lb : kt::layouts()) {
      auto a = kt::make_input(la, dev(), gen), b = kt::make_input(lb, dev(), gen);
      if (a.r.shape() != b.r.shape()) continue;
      SCOPED_TRACE(la.name + " op " + lb.name);
      for_each_binary([&](const char* name, auto op, auto ref) {
        SCOPED_TRACE(name);
        EXPECT_TRUE(kt::matches(op(a.t, b.t), Ref::zip(a.r, b.r, ref)));
      });
      for_each_comparison([&](const char* name, auto op, auto ref) {
        SCOPED_TRACE(name);
        auto y = op(a.t, b.t);
        EXPECT_EQ(y.dtype(), DType::boolean);
        EXPECT_TRUE(kt::matches(y, Ref::zip(a.r, b.r, ref)));
      });
    }
  }
}

// NumPy broadcasting between different ranks, both ways round.
TEST_P(ElementwiseTest, BroadcastDifferentRanks) {
  auto av = kt::uniform(2 * 7, -3, 3, rng()), bv = kt::uniform(5, -3, 3, rng());
  auto cv = kt::uniform(7, -3, 3, rng());
  auto a = Tensor<3>::from_data(av, {2, 1, 7}, dev());
  auto b = Tensor<2>::from_data(bv, {5, 1}, dev());
  auto c = Tensor<1>::from_data(cv, {7}, dev());
  auto s = Tensor<0>::full({}, 1.5, DType::f32, dev());
  Ref ra = Ref::of(av, {2, 1, 7}), rb = Ref::of(bv, {5, 1}), rc = Ref::of(cv, {7});
  Ref rs = Ref::scalar(1.5);
  for_each_binary([&](const char* name, auto op, auto ref) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(kt::matches(op(a, b), Ref::zip(ra, rb, ref)));  // [2,1,7] x [5,1] -> [2,5,7]
    EXPECT_TRUE(kt::matches(op(b, a), Ref::zip(rb, ra, ref)));
    EXPECT_TRUE(kt::matches(op(b, c), Ref::zip(rb, rc, ref)));  // [5,1] x [7] -> [5,7]
    EXPECT_TRUE(kt::matches(op(c, a), Ref::zip(rc, ra, ref)));
    EXPECT_TRUE(kt::matches(op(s, b), Ref::zip(rs, rb, ref)));  // rank 0 with rank 2
    EXPECT_TRUE(kt::matches(op(c.slice(0, 0, 7), s), Ref::zip(rc, rs, ref)));
  });
}

// Views big enough for several blocks and threads: transposed, sliced and broadcast operands.
TEST_P(ElementwiseTest, LargeViews) {
  auto av = kt::uniform(700 * 517, -3, 3, rng()), bv = kt::uniform(700, -3, 3, rng());
  auto a = Tensor<2>::from_data(av, {700, 517}, dev());
  auto b = Tensor<2>::from_data(bv, {700, 1}, dev());
  Ref ra = Ref::of(av, {700, 517}), rb = Ref::of(bv, {700, 1});
  auto at = a.transpose(0, 1), bt = b.transpose(0, 1);  // [517, 700] and [1, 700]
  Ref rat = ra.transpose(0, 1), rbt = rb.transpose(0, 1);
  auto sin = [](double x) { return std::sin(x); };
  EXPECT_TRUE(kt::matches(at.sin(), rat.map(sin), kMath));
  EXPECT_TRUE(kt::matches(a + b, Ref::zip(ra, rb, in_float(std::plus<float>()))));
  EXPECT_TRUE(kt::matches(at * bt, Ref::zip(rat, rbt, in_float(std::multiplies<float>()))));
  EXPECT_TRUE(kt::matches(kiln::where(at > bt, at, bt), Ref::zip(rat, rbt, nan_max)));
  auto as = a.slice(0, 1, 700, 3).slice(1, 2, 517, 2);
  Ref ras = ra.slice(0, 1, 700, 3).slice(1, 2, 517, 2);
  EXPECT_TRUE(kt::matches(as.exp(), ras.map([](double x) { return std::exp(x); }), kMath));
  auto e = b.expand(Shape<3>{3, 700, 517}).transpose(0, 2);  // stride 0 inside
  EXPECT_TRUE(kt::matches(
      e.tanh(), rb.expand({3, 700, 517}).transpose(0, 2).map([](double x) { return std::tanh(x); }),
      kMath));
}

TEST_P(ElementwiseTest, ScalarsOnEitherSide) {
  for (const auto& l : kt::layouts()) {
    SCOPED_TRACE(l.name);
    auto in = kt::make_input(l, dev(), [&](std::size_t n) { return kt::uniform(n, -4, 4, rng()); });
    const auto& x = in.t;
    auto r = [&](auto f) { return in.r.map(f); };
    EXPECT_TRUE(kt::matches(x + 2, r([](double v) { return float(v) + 2.0f; })));
    EXPECT_TRUE(kt::matches(x - 1.5, r([](double v) { return float(v) - 1.5f; })));
    EXPECT_TRUE(kt::matches(2 - x, r([](double v) { return 2.0f - float(v); })));
    EXPECT_TRUE(kt::matches(1 / x, r([](double v) { return 1.0f / float(v); })));
    EXPECT_TRUE(kt::matches(x / 4, r([](double v) { return float(v) / 4.0f; })));
    EXPECT_TRUE(kt::matches(0.5f * x, r([](double v) { return 0.5f * float(v); })));
    EXPECT_TRUE(kt::matches(kiln::minimum(x, 0.25), r([](double v) { return std::min(v, 0.25); })));
    EXPECT_TRUE(kt::matches(kiln::maximum(0, x), r([](double v) { return std::max(0.0, v); })));
    EXPECT_TRUE(kt::matches(x < 0.5, r([](double v) { return v < 0.5; })));
    EXPECT_TRUE(kt::matches(1 >= x, r([](double v) { return 1 >= v; })));
    EXPECT_TRUE(kt::matches(
        (x * 0.5 + 0.25).sin().abs(),
        r([](double v) { return std::fabs(std::sin(double(float(v) * 0.5f + 0.25f))); }), kMath));
  }
}

// IEEE: NaN propagates through arithmetic and minimum/maximum; comparisons with NaN are false
// except !=; infinities follow IEEE (inf - inf is NaN, 1 / 0 is inf).
TEST_P(ElementwiseTest, NaNAndInfinity) {
  const std::vector<float> av = {kNaN, 1, kNaN, kInf, -kInf, kInf, 0, -1, 2, kInf};
  const std::vector<float> bv = {1, kNaN, kNaN, kInf, kInf, 1, 0, 0, kInf, -kInf};
  const std::int64_t n = static_cast<std::int64_t>(av.size());
  auto a = Tensor<1>::from_data(av, {n}, dev()), b = Tensor<1>::from_data(bv, {n}, dev());
  Ref ra = Ref::of(av, {n}), rb = Ref::of(bv, {n});
  for_each_binary([&](const char* name, auto op, auto ref) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(kt::matches(op(a, b), Ref::zip(ra, rb, ref)));
    EXPECT_TRUE(kt::matches(op(b, a), Ref::zip(rb, ra, ref)));
  });
  for_each_comparison([&](const char* name, auto op, auto ref) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(kt::matches(op(a, b), Ref::zip(ra, rb, ref)));
    EXPECT_TRUE(kt::matches(op(a, 1), Ref::zip(ra, Ref::scalar(1), ref)));
  });
  EXPECT_TRUE(std::isnan(kiln::maximum(a, 0).to_vector()[0]));
  EXPECT_TRUE(std::isnan(kiln::minimum(0, a).to_vector()[0]));
}

// Wide-range operands: overflow to ±Inf, underflow and subnormals stay exact IEEE.
TEST_P(ElementwiseTest, BinaryWholeRange) {
  auto av = kt::wide_floats(2048, rng()), bv = kt::wide_floats(2048, rng());
  std::shuffle(bv.begin(), bv.end(), rng());
  const auto n = static_cast<std::int64_t>(av.size());
  auto a = Tensor<1>::from_data(av, {n}, dev()), b = Tensor<1>::from_data(bv, {n}, dev());
  for_each_binary([&](const char* name, auto op, auto ref) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(kt::matches(op(a, b), Ref::zip(Ref::of(av, {n}), Ref::of(bv, {n}), ref)));
  });
}

TEST_P(ElementwiseTest, DTypePromotion) {
  const std::vector<std::int32_t> iv = {-7, -2, 0, 3, 5, 9};
  const std::vector<float> fv = {0.5f, -1.25f, 2, 3.75f, -4, 8};
  auto i = Tensor<1>::from_data(iv, {6}, dev());
  auto f = Tensor<1>::from_data(fv, {6}, dev());
  Ref ri = Ref::of(iv, {6}), rf = Ref::of(fv, {6});
  auto check = [&](const auto& t, DType want, const Ref& r, const char* what, Tol tol = {}) {
    EXPECT_EQ(t.dtype(), want) << what;
    EXPECT_TRUE(kt::matches(t, r, tol)) << what;
  };
  check(i + f, DType::f32, Ref::zip(ri, rf, in_float(std::plus<float>())), "i32 + f32");
  check(f * i, DType::f32, Ref::zip(rf, ri, in_float(std::multiplies<float>())), "f32 * i32");
  check(i + i * i, DType::i32, ri.map([](double v) { return v + v * v; }), "i32 + i32 * i32");
  check(i * 2, DType::i32, ri.map([](double v) { return v * 2; }), "i32 * 2");
  check(3 - i, DType::i32, ri.map([](double v) { return 3 - v; }), "3 - i32");
  check(i * 0.5, DType::f32, ri.map([](double v) { return v * 0.5; }), "i32 * 0.5");
  check(i + 2.0, DType::f32, ri.map([](double v) { return v + 2; }), "i32 + 2.0 (a float scalar)");
  check(i / (i + 10), DType::f32, ri.map([](double v) { return float(v) / float(v + 10); }),
        "i32 / i32 is true division");
  check(i / 2, DType::f32, ri.map([](double v) { return v / 2; }), "i32 / 2 is true division");
  check(-i, DType::i32, ri.map([](double v) { return -v; }), "-i32");
  check(i.abs(), DType::i32, ri.map([](double v) { return std::fabs(v); }), "abs(i32)");
  check(kiln::maximum(i, 1), DType::i32, ri.map([](double v) { return std::max(v, 1.0); }),
        "maximum(i32, 1)");
  check(i.clamp(-3, 4), DType::i32, ri.map([](double v) { return std::clamp(v, -3.0, 4.0); }),
        "clamp(i32, -3, 4)");
  check(i.sin(), DType::f32, ri.map([](double v) { return std::sin(v); }), "sin(i32) is f32",
        kMath);
  check(i < 2.5, DType::boolean, ri.map([](double v) { return v < 2.5; }), "i32 < 2.5");
  check(i == f.to(DType::i32), DType::boolean,
        Ref::zip(ri, rf, [](double a, double b) { return a == std::trunc(b); }), "i32 == i32");
  auto t = Tensor<1>::from_data(std::vector<bool>{true, false, true, false}, {4}, dev());
  auto u = Tensor<1>::from_data(std::vector<bool>{true, true, false, false}, {4}, dev());
  check(t == u, DType::boolean, Ref::of(std::vector<int>{1, 0, 0, 1}, {4}), "bool == bool");
  check(t + u, DType::i32, Ref::of(std::vector<int>{2, 1, 1, 0}, {4}), "bool + bool -> i32");
  check(t + f.slice(0, 0, 4), DType::f32, Ref::of(std::vector<float>{1.5f, -1.25f, 3, 3.75f}, {4}),
        "bool + f32");
  check(t.sin(), DType::f32, Ref::of(std::vector<double>{std::sin(1.0), 0, std::sin(1.0), 0}, {4}),
        "sin(bool) is f32", kMath);
}

TEST_P(ElementwiseTest, WhereBroadcastsAllThree) {
  for (const auto& l : kt::layouts()) {
    SCOPED_TRACE(l.name);
    auto a = kt::make_input(l, dev(), [&](std::size_t n) { return kt::uniform(n, -2, 2, rng()); });
    auto cv = kt::uniform(static_cast<std::size_t>(a.r.shape()[0]), -1, 1, rng());
    auto c = Tensor<1>::from_data(cv, {a.r.shape()[0]}, dev()).unsqueeze(1) > 0;  // [rows, 1]
    Ref rc = Ref::of(cv, {a.r.shape()[0], 1}).map([](double v) { return v > 0; });
    auto b = Tensor<0>::full({}, -9, DType::f32, dev());
    auto pick = [](double c, double x, double y) { return c != 0 ? x : y; };
    EXPECT_TRUE(kt::matches(kiln::where(c, a.t, b), Ref::zip3(rc, a.r, Ref::scalar(-9), pick)));
    auto mask = a.t > 0;  // a bool view-derived cond, same shape
    EXPECT_TRUE(
        kt::matches(kiln::where(mask, a.t, -a.t), a.r.map([](double v) { return std::fabs(v); })));
  }
  auto c = Tensor<1>::from_data(std::vector<bool>{true, false}, {2}, dev());
  auto i = Tensor<1>::from_data(std::vector<std::int32_t>{4, 5}, {2}, dev());
  auto f = Tensor<1>::full({2}, 0.5, DType::f32, dev());
  auto y = kiln::where(c, i, f);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{4, 0.5f}));
}

TEST_P(ElementwiseTest, Casts) {
  const std::vector<float> fv = {1.7f, -1.7f, 2.5f, -0.0f, 0.0f, 1e-30f, -3.999f, 100.25f, kNaN};
  auto f = Tensor<1>::from_data(fv, {9}, dev());
  auto i = f.slice(0, 0, 8).to(DType::i32);
  EXPECT_EQ(i.dtype(), DType::i32);
  EXPECT_EQ(i.to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, -1, 2, 0, 0, 0, -3, 100}));
  auto b = f.to(DType::boolean);
  EXPECT_EQ(b.dtype(), DType::boolean);
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{1, 1, 1, 0, 0, 1, 1, 1, 1}));  // NaN is true
  EXPECT_EQ(b.to(DType::f32).to_vector(), (std::vector<float>{1, 1, 1, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(i.to(DType::f32).to_vector(), (std::vector<float>{1, -1, 2, 0, 0, 0, -3, 100}));
  EXPECT_EQ(i.to(DType::boolean).to_vector<bool>(), (std::vector<bool>{1, 1, 1, 0, 0, 0, 1, 1}));
  // On a strided view, and a cast to the same dtype.
  auto m = kt::make_input(kt::layouts()[1], dev(),
                          [&](std::size_t n) { return kt::uniform(n, -50, 50, rng()); });
  EXPECT_TRUE(kt::matches(m.t.to(DType::i32), m.r.map([](double v) { return std::trunc(v); })));
  EXPECT_TRUE(kt::matches(m.t.to(DType::f32), m.r));
}

}  // namespace
