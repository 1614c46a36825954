// The half types bf16 and f16 through the front end, on every device: element-wise ops compute in
// f32 and round once per stored result; promotion and casts as PyTorch's; reductions accumulate
// in f32 or wider; softmax computes in f32; a fused chain rounds only what it stores. Each
// result is compared with a float64 reference with the dtype's bound (docs/accuracy.md):
// within one unit in the last place of the half type (its ULP at the exact value), which
// covers the f32 computation's error (a few f32 ULPs, 2^-13 to 2^-16 of a half ULP) and the
// final rounding (half a ULP).
#include <cmath>
#include <cstring>
#include <limits>

#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

class HalfTest : public kt::DeviceTest {
 protected:
  kt::ConfigGuard guard_;
  static void set_fusion(bool on) {
    kiln::Config c = kiln::config();
    c.fusion = on;
    kiln::set_config(c);
  }
  // n values of [lo, hi) as a tensor of dtype t (each rounded to t from f32).
  Tensor<1> values(std::size_t n, double lo, double hi, DType t) {
    return Tensor<1>::from_data(kt::uniform(n, lo, hi, rng()), {static_cast<std::int64_t>(n)},
                                dev())
        .to(t);
  }
};
KILN_INSTANTIATE_DEVICES(HalfTest);

constexpr DType kHalves[] = {DType::bf16, DType::f16};

// The half type's ULP at x: 8 significant bits for bf16, 11 for f16 (subnormals below 2^-14).
double half_ulp(double x, DType t) {
  const int bits = t == DType::bf16 ? 8 : 11, min_exp = t == DType::bf16 ? -126 : -14;
  int e = 0;
  std::frexp(x == 0 ? std::ldexp(1.0, min_exp) : x, &e);  // x = m * 2^e, m in [0.5, 1)
  return std::ldexp(1.0, std::max(e - 1, min_exp) - (bits - 1));
}

// x rounded to dtype t by the host types (tested over every pattern in tests/core).
double round_to(double x, DType t) {
  const float f = static_cast<float>(x);
  return t == DType::bf16 ? static_cast<float>(kiln::bfloat16(f))
                          : static_cast<float>(kiln::float16(f));
}

// Whether got is within `ulps` half ULPs of exact (NaN matches NaN; an infinite rounding of
// exact must be matched exactly).
::testing::AssertionResult near_half(double got, double exact, DType t, double ulps = 1) {
  if (std::isnan(exact) || std::isnan(got)) {
    if (std::isnan(exact) && std::isnan(got)) return ::testing::AssertionSuccess();
  } else if (std::isinf(round_to(exact, t)) || std::isinf(got)) {
    if (got == round_to(exact, t)) return ::testing::AssertionSuccess();
  } else if (std::fabs(got - exact) <= ulps * half_ulp(exact, t)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << dtype_name(t) << ": got " << got << ", exact " << exact << " (" << ulps
         << " ULP = " << ulps * half_ulp(exact, t) << ")";
}

TEST_P(HalfTest, UnaryOpsComputeInF32AndRoundOnce) {
  struct Case {
    const char* name;
    Tensor<1> (*op)(const Tensor<1>&);
    double (*ref)(double);
    double lo, hi;
  };
  const Case cases[] = {
      {"neg", [](const Tensor<1>& x) { return -x; }, [](double x) { return -x; }, -9, 9},
      {"abs", [](const Tensor<1>& x) { return x.abs(); }, [](double x) { return std::fabs(x); }, -9,
       9},
      {"relu", [](const Tensor<1>& x) { return x.relu(); },
       [](double x) { return x > 0 ? x : 0.0; }, -9, 9},
      {"sin", [](const Tensor<1>& x) { return x.sin(); }, [](double x) { return std::sin(x); }, -9,
       9},
      {"cos", [](const Tensor<1>& x) { return x.cos(); }, [](double x) { return std::cos(x); }, -9,
       9},
      {"tan", [](const Tensor<1>& x) { return x.tan(); }, [](double x) { return std::tan(x); },
       -1.5, 1.5},
      {"exp", [](const Tensor<1>& x) { return x.exp(); }, [](double x) { return std::exp(x); }, -12,
       12},
      {"log", [](const Tensor<1>& x) { return x.log(); }, [](double x) { return std::log(x); },
       1e-3, 1e3},
      {"sqrt", [](const Tensor<1>& x) { return x.sqrt(); }, [](double x) { return std::sqrt(x); },
       0, 1e3},
      {"rsqrt", [](const Tensor<1>& x) { return x.rsqrt(); },
       [](double x) { return 1 / std::sqrt(x); }, 1e-3, 1e3},
      {"tanh", [](const Tensor<1>& x) { return x.tanh(); }, [](double x) { return std::tanh(x); },
       -5, 5},
      {"sigmoid", [](const Tensor<1>& x) { return x.sigmoid(); },
       [](double x) { return 1 / (1 + std::exp(-x)); }, -12, 12},
      {"gelu", [](const Tensor<1>& x) { return x.gelu(); },
       [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }, -6, 6},
      {"silu", [](const Tensor<1>& x) { return x.silu(); },
       [](double x) { return x / (1 + std::exp(-x)); }, -12, 12},
      {"erf", [](const Tensor<1>& x) { return x.erf(); }, [](double x) { return std::erf(x); }, -4,
       4},
  };
  for (DType t : kHalves) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.name) + " " + dtype_name(t));
      const Tensor<1> x = values(3000, c.lo, c.hi, t);
      const Tensor<1> y = c.op(x);
      ASSERT_EQ(y.dtype(), t);
      const auto xs = x.to_vector(), ys = y.to_vector();
      for (std::size_t i = 0; i < xs.size(); ++i)
        ASSERT_TRUE(near_half(ys[i], c.ref(xs[i]), t)) << "x = " << xs[i];
    }
  }
}

TEST_P(HalfTest, BinaryOpsAndScalars) {
  for (DType t : kHalves) {
    SCOPED_TRACE(dtype_name(t));
    const Tensor<1> a = values(2000, -50, 50, t), b = values(2000, 0.5, 8, t);
    const auto as = a.to_vector(), bs = b.to_vector();
    auto check = [&](const Tensor<1>& y, auto ref) {
      ASSERT_EQ(y.dtype(), t);
      const auto ys = y.to_vector();
      for (std::size_t i = 0; i < ys.size(); ++i)
        ASSERT_TRUE(near_half(ys[i], ref(double{as[i]}, double{bs[i]}), t)) << i;
    };
    check(a + b, [](double x, double y) { return x + y; });
    check(a - b, [](double x, double y) { return x - y; });
    check(a * b, [](double x, double y) { return x * y; });
    check(a / b, [](double x, double y) { return x / y; });
    check(kiln::maximum(a, b), [](double x, double y) { return std::max(x, y); });
    check(b.pow(1.5), [](double, double y) { return std::pow(y, 1.5); });
    // A floating C++ scalar keeps the half type, and is used as f32 (not rounded to it first).
    check(a * 0.1, [](double x, double) { return x * double{0.1f}; });
    check(3 - a, [](double x, double) { return 3 - x; });
    const auto lt = (a < b).to_vector<bool>();
    for (std::size_t i = 0; i < lt.size(); ++i) ASSERT_EQ(lt[i], as[i] < bs[i]);
  }
}

TEST_P(HalfTest, PromotionAsPyTorch) {
  auto t = [&](DType d) { return Tensor<1>::zeros({4}, d, dev()); };
  EXPECT_EQ((t(DType::bf16) + t(DType::f16)).dtype(), DType::f32);
  EXPECT_EQ((t(DType::bf16) + t(DType::f32)).dtype(), DType::f32);
  EXPECT_EQ((t(DType::f16) * t(DType::i32)).dtype(), DType::f16);
  EXPECT_EQ((t(DType::boolean) - t(DType::bf16)).dtype(), DType::bf16);
  EXPECT_EQ((t(DType::i32) / t(DType::bf16)).dtype(), DType::bf16);
  EXPECT_EQ((t(DType::i32) / t(DType::i32)).dtype(), DType::f32);
  EXPECT_EQ((t(DType::f16) + 2).dtype(), DType::f16);
  EXPECT_EQ((t(DType::i32) + 2.5).dtype(), DType::f32);
  EXPECT_EQ(t(DType::i32).sin().dtype(), DType::f32);
  EXPECT_EQ(t(DType::bf16).sum().dtype(), DType::bf16);
  EXPECT_EQ(t(DType::f16).mean().dtype(), DType::f16);
  EXPECT_EQ(t(DType::bf16).argmax().dtype(), DType::i32);
  EXPECT_EQ(kiln::where(t(DType::bf16) > 0, t(DType::bf16), t(DType::bf16)).dtype(), DType::bf16);
}

TEST_P(HalfTest, CastsBetweenEveryPair) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> src = {
      0.0f,  -0.0f,    1.0f,     -2.5f, 3.14159f,
      1e-3f, 65504.0f, 65520.0f, 1e5f,  -1e5f,
      3e38f, 1e-8f,    kInf,     -kInf, std::numeric_limits<float>::quiet_NaN(),
      7.0f,  -7.75f,   0.4f};
  const DType all[] = {DType::f32, DType::i32, DType::boolean, DType::bf16, DType::f16};
  const auto x32 = Tensor<1>::from_data(src, {static_cast<std::int64_t>(src.size())}, dev());
  for (DType from : all) {
    // The source values as `from` holds them (an f32 -> from cast is itself under test below
    // for the half types, against the host conversion).
    const Tensor<1> x = x32.to(from);
    const auto xs = x.to_vector();
    for (DType to : all) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      const Tensor<1> y = x.to(to);
      ASSERT_EQ(y.dtype(), to);
      const auto ys = y.to_vector();
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const float v = xs[i];
        double want;
        if (to == DType::boolean)
          want = v != 0 ? 1 : 0;
        else if (to == DType::i32)
          want = std::isnan(v)        ? 0
                 : v >= 2147483648.0f ? 2147483647
                 : v < -2147483648.0f ? -2147483648.0
                                      : std::trunc(v) + 0.0;  // +0.0: an integer has no -0
        else if (to == DType::f32)
          want = v;
        else
          want = round_to(v, to);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(ys[i])) << v;
        } else {
          EXPECT_EQ(ys[i], static_cast<float>(want)) << "from " << v;  // read back as f32
          EXPECT_EQ(std::signbit(ys[i]), std::signbit(want)) << "from " << v;
        }
      }
    }
  }
}

TEST_P(HalfTest, ReductionsAccumulateInF32) {
  for (DType t : kHalves) {
    SCOPED_TRACE(dtype_name(t));
    const std::int64_t rows = 3, cols = 4096;
    const auto x =
        Tensor<2>::from_data(kt::uniform(rows * cols, -2, 2, rng()), {rows, cols}, dev()).to(t);
    const auto xs = x.to_vector();
    const auto sum = x.sum(1), mean = x.mean(1), mx = x.max(1);
    const auto am = x.argmax(1);
    ASSERT_EQ(sum.dtype(), t);
    ASSERT_EQ(mean.dtype(), t);
    ASSERT_EQ(mx.dtype(), t);
    const auto ss = sum.to_vector(), ms = mean.to_vector(), mxs = mx.to_vector();
    const auto ams = am.to_vector<std::int32_t>();
    for (std::int64_t r = 0; r < rows; ++r) {
      double s = 0, m = -1e30;
      std::int32_t arg = 0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double v = xs[r * cols + c];
        s += v;
        if (v > m) m = v, arg = static_cast<std::int32_t>(c);
      }
      // f32 (or wider) accumulation of 4096 terms, then one rounding to the half type.
      EXPECT_TRUE(near_half(ss[r], s, t, 1.01)) << "sum of row " << r;
      EXPECT_TRUE(near_half(ms[r], s / cols, t, 1.01)) << "mean of row " << r;
      EXPECT_EQ(mxs[r], m);
      EXPECT_EQ(ams[r], arg);
    }
    EXPECT_TRUE(near_half(
        x.sum().item(),
        [&] {
          double s = 0;
          for (float v : xs) s += v;
          return s;
        }(),
        t, 1.01));
  }
}

TEST_P(HalfTest, SoftmaxComputesInF32) {
  for (DType t : kHalves) {
    SCOPED_TRACE(dtype_name(t));
    const std::int64_t rows = 4, cols = 300;
    const auto x =
        Tensor<2>::from_data(kt::uniform(rows * cols, -6, 6, rng()), {rows, cols}, dev()).to(t);
    const auto y = x.softmax(1), ly = x.log_softmax(1);
    ASSERT_EQ(y.dtype(), t);
    ASSERT_EQ(ly.dtype(), t);
    const auto xs = x.to_vector(), ys = y.to_vector(), lys = ly.to_vector();
    for (std::int64_t r = 0; r < rows; ++r) {
      double m = -1e30, s = 0;
      for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, double{xs[r * cols + c]});
      for (std::int64_t c = 0; c < cols; ++c) s += std::exp(xs[r * cols + c] - m);
      for (std::int64_t c = 0; c < cols; ++c) {
        const double v = xs[r * cols + c] - m;
        ASSERT_TRUE(near_half(ys[r * cols + c], std::exp(v) / s, t)) << r << "," << c;
        ASSERT_TRUE(near_half(lys[r * cols + c], v - std::log(s), t)) << r << "," << c;
      }
    }
  }
}

// Fused, a chain of half ops keeps its intermediates in f32 and rounds the result once: it equals
// the same chain computed in f32 and cast at the end, bit for bit. Unfused, each op rounds its
// stored result. Both meet their stated bounds against float64.
TEST_P(HalfTest, FusedChainRoundsOncePerStoredResult) {
  bool fusion_live = false;
  for (const auto& f : kiln::features())
    if (f.name == "fusion") fusion_live = f.live;
  for (DType t : kHalves) {
    SCOPED_TRACE(dtype_name(t));
    const Tensor<1> x = values(5000, -3, 3, t);
    auto chain = [](const Tensor<1>& v) { return ((v * 1.7f + 0.3f).sin() * 2.0f).exp(); };
    const auto xs = x.to_vector();
    set_fusion(true);
    const auto fused = chain(x).to_vector();
    const auto f32_once = chain(x.to(DType::f32)).to(t).to_vector();
    set_fusion(false);
    const auto eager = chain(x).to_vector();
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double exact = std::exp(2 * std::sin(xs[i] * double{1.7f} + double{0.3f}));
      if (fusion_live) {
        ASSERT_TRUE(near_half(fused[i], exact, t)) << "fused, x = " << xs[i];
        ASSERT_EQ(fused[i], f32_once[i]) << "x = " << xs[i];
      } else {  // (a build without fusion runs every op eagerly either way)
        ASSERT_EQ(fused[i], eager[i]) << "x = " << xs[i];
      }
      // Each of the four stored roundings adds up to half a ULP, magnified by the ops after it
      // (exp turns an absolute error e of its argument into a relative one of about e).
      ASSERT_TRUE(near_half(eager[i], exact, t, 12)) << "eager, x = " << xs[i];
    }
  }
}

TEST_P(HalfTest, MatmulAccumulatesInF32) {
  for (DType t : kHalves) {
    SCOPED_TRACE(dtype_name(t));
    const std::int64_t m = 33, k = 300, n = 17;
    const auto a = Tensor<2>::from_data(kt::uniform(m * k, -1, 1, rng()), {m, k}, dev()).to(t);
    const auto b = Tensor<2>::from_data(kt::uniform(k * n, -1, 1, rng()), {k, n}, dev()).to(t);
    const auto c = kiln::matmul(a, b);
    ASSERT_EQ(c.dtype(), t);
    const auto as = a.to_vector(), bs = b.to_vector(), cs = c.to_vector();
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double exact = 0, mag = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          exact += double{as[i * k + p]} * bs[p * n + j];
          mag += std::fabs(double{as[i * k + p]} * bs[p * n + j]);
        }
        // f32 accumulation of k products (each exact in f32), then one rounding to t.
        const double f32_bound = k * std::ldexp(1.0, -24) * mag;
        EXPECT_LE(std::fabs(cs[i * n + j] - exact), f32_bound + half_ulp(exact, t))
            << i << "," << j;
      }
    }
  }
  const auto a = Tensor<2>::zeros({2, 2}, DType::bf16, dev());
  EXPECT_THROW(kiln::matmul(a, Tensor<2>::zeros({2, 2}, DType::f32, dev())), kiln::DTypeError);
}

// Precision::medium lets f32 products use bf16 tensor cores on CUDA (operands rounded to 8
// significant bits, fp32 accumulation): within 2^-7 of sum |a_i b_i| plus the fp32 term. The
// CPU stays strict.
TEST_P(HalfTest, MediumPrecisionF32Matmul) {
  const std::int64_t m = 64, k = 256, n = 48;
  const auto a = Tensor<2>::from_data(kt::uniform(m * k, -1, 1, rng()), {m, k}, dev());
  const auto b = Tensor<2>::from_data(kt::uniform(k * n, -1, 1, rng()), {k, n}, dev());
  const kiln::Precision saved = kiln::float32_matmul_precision();
  kiln::set_float32_matmul_precision(kiln::Precision::medium);
  const auto c = kiln::matmul(a, b).to_vector();
  kiln::set_float32_matmul_precision(saved);
  EXPECT_STREQ(kiln::precision_name(kiln::Precision::medium), "medium");
  const auto as = a.to_vector(), bs = b.to_vector();
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double exact = 0, mag = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        exact += double{as[i * k + p]} * bs[p * n + j];
        mag += std::fabs(double{as[i * k + p]} * bs[p * n + j]);
      }
      EXPECT_LE(std::fabs(c[i * n + j] - exact), (0x1p-7 + k * 0x1p-24) * mag) << i << "," << j;
    }
  }
}

TEST_P(HalfTest, RandomInHalfRoundsTheF32Draw) {
  for (DType t : kHalves) {
    const auto d = kiln::Distribution::normal(0, 1);
    const auto h = Tensor<1>::random({5000}, d, dev(), 7, t);
    ASSERT_EQ(h.dtype(), t);
    const auto f = Tensor<1>::random({5000}, d, dev(), 7).to_vector();
    const auto hs = h.to_vector();
    for (std::size_t i = 0; i < f.size(); ++i) ASSERT_EQ(hs[i], round_to(f[i], t)) << i;
  }
  EXPECT_THROW(Tensor<1>::random({4}, kiln::Distribution::uniform(0, 1), dev(), 0, DType::i32),
               kiln::DTypeError);
}

TEST_P(HalfTest, HostTypesInAndOut) {
  const std::vector<kiln::bfloat16> b = {kiln::bfloat16(1.5f), kiln::bfloat16(-2.0f),
                                         kiln::bfloat16(3.140625f)};
  const auto x = Tensor<1>::from_data(b, {3}, dev());
  EXPECT_EQ(x.dtype(), DType::bf16);
  const auto back = x.to_vector<kiln::bfloat16>();
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_EQ(back[i].bits, b[i].bits);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.140625f}));
  const auto h = x.to(DType::f16);
  EXPECT_EQ(h.to_vector<kiln::float16>()[2].bits, kiln::float16(3.140625f).bits);
  EXPECT_EQ(h.sum().item<float>(), 2.640625f);
  EXPECT_NE(kiln::format(x).find("dtype=bf16"), std::string::npos) << kiln::format(x);
}

}  // namespace
