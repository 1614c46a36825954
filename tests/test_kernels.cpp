// The CPU block kernels (src/cpu/kernels.hpp), both tables, against double (or long double)
// references: every f32 unary op over a stride through all 2^32 float bit patterns plus the
// special values, held to the ULP bounds of docs/accuracy.md; exact ops bit for bit; i32
// wrap-around; casts at their limits; NaN and signed zeros; splat operands; tails; in-place
// output; and the DTypeError of unsupported combinations.
//
// KILN_ULP_REPORT=1 prints the measured maximum error of each op and table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.hpp"
#include "kernel_tables.hpp"
#include "kiln/error.hpp"

namespace {

using kiln::DType;
using kiln::cpu::KernelTable;
using kiln::cpu::Lanes;
using kiln::ir::Op;
using kt::all_tables;
using kt::table_name;
using kt::TableParam;
using kt::TableTest;
using i32 = std::int32_t;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kDenormMin = std::numeric_limits<float>::denorm_min();
constexpr i32 kIntMin = std::numeric_limits<i32>::min();
constexpr i32 kIntMax = std::numeric_limits<i32>::max();

bool is_simd(const KernelTable& t) { return &t != &kiln::cpu::scalar_kernels(); }

// ---------------------------------------------------------------------------------------------
// Helpers

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Outputs are filled with this NaN before a run. No input of the tests has these bits (nor their
// negation), so a lane that still holds them was not written; ulp_distance and same() reject it.
constexpr std::uint32_t kPoison = 0x7fc0dead;
template <class T>
std::vector<T> poisoned(std::size_t n) {
  std::vector<T> v(n);
  for (auto& x : v) std::memcpy(&x, &kPoison, sizeof x);
  return v;
}

// Distance in units in the last place: the number of floats between a and b (+0 and -0 are the
// same point). Two NaNs are 0 apart; a NaN and a number infinitely far; so are an infinity and
// a finite number, so that overflow to inf (or a kernel that saturates at FLT_MAX) counts.
std::int64_t ulp_distance(float a, float b) {
  if (bits_of(a) == kPoison || bits_of(b) == kPoison)
    return std::numeric_limits<std::int64_t>::max();
  if (std::isnan(a) || std::isnan(b)) {
    return std::isnan(a) && std::isnan(b) ? 0 : std::numeric_limits<std::int64_t>::max();
  }
  if (std::isinf(a) != std::isinf(b)) return std::numeric_limits<std::int64_t>::max();
  auto key = [](float x) {
    const std::int64_t m = bits_of(x) & 0x7fffffffu;
    return (bits_of(x) >> 31) ? -m : m;
  };
  return std::llabs(key(a) - key(b));
}

// got equals want: both NaN, or the same bits (so the sign of zero counts).
bool same(float got, float want) {
  if (bits_of(got) == kPoison) return false;
  return (std::isnan(got) && std::isnan(want)) || bits_of(got) == bits_of(want);
}

std::vector<float> run_unary(const KernelTable& t, Op op, const std::vector<float>& x) {
  auto out = poisoned<float>(x.size());
  t.unary(op, DType::f32, DType::f32, Lanes{x.data()}, out.data(), x.size());
  return out;
}

std::vector<float> run_binary_f(const KernelTable& t, Op op, const std::vector<float>& a,
                                const std::vector<float>& b) {
  auto out = poisoned<float>(a.size());
  t.binary(op, DType::f32, Lanes{a.data()}, Lanes{b.data()}, out.data(), a.size());
  return out;
}

// Every 4099th of the 2^32 float bit patterns (4099 is prime, so the low mantissa bits vary
// too), then the values where the kernels switch paths or the functions change behaviour.
std::vector<float> sweep_inputs() {
  std::vector<float> v;
  for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += 4099) {
    v.push_back(from_bits(static_cast<std::uint32_t>(b)));
  }
  // 505.796417 and 252.898209 are the floats in [1, 39000] nearest a multiple of pi and an odd
  // multiple of pi/2 (8.4e-9 and 4.2e-9 away): the hardest arguments of sin's and cos's
  // reduction by pi.
  const float specials[] = {
      0.0f,           -0.0f,        kInf,        -kInf,       kNaN,
      -kNaN,          kDenormMin,   -kDenormMin, FLT_MIN,     -FLT_MIN,
      FLT_MIN * 0.5f, FLT_MAX,      -FLT_MAX,    1.0f,        -1.0f,
      0.5f,           2.0f,         0x1p-12f,    -0x1p-12f,   0x1.fffffep-13f,
      39000.0f,       -39000.0f,    39000.004f,  -39000.004f, 38999.996f,
      88.0f,          88.00001f,    88.7f,       88.72283f,   88.72284f,
      89.0f,          -87.0f,       -87.33654f,  -87.5f,      -100.0f,
      -103.97f,       -103.98f,     -104.0f,     -104.1f,     104.0f,
      87.0f,          87.00001f,    -87.00001f,  -15.0f,      -15.000001f,
      -14.999999f,    -14.0f,       -13.0f,      15.0f,       18.71497f,
      18.72f,         1e-30f,       -1e-30f,     1.5707964f,  -1.5707964f,
      3.1415927f,     4.712389f,    1e6f,        1e10f,       1e38f,
      12867.963f,     0.99999994f,  1.0000001f,  505.796417f, -505.796417f,
      252.898209f,    -252.898209f,
  };
  v.insert(v.end(), std::begin(specials), std::end(specials));
  return v;
}

const std::vector<float>& sweep() {
  static const std::vector<float> v = sweep_inputs();
  return v;
}

// A fixed random order of the sweep: most vectors then mix fast-path arguments with ones that
// need the slow path.
const std::vector<std::size_t>& shuffled_order() {
  static const std::vector<std::size_t> v = [] {
    std::vector<std::size_t> p(sweep().size());
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = i;
    std::shuffle(p.begin(), p.end(), std::mt19937(12345));
    return p;
  }();
  return v;
}

bool report() { return std::getenv("KILN_ULP_REPORT") != nullptr; }

// ---------------------------------------------------------------------------------------------
// Unary f32 accuracy over the whole range

struct UnarySpec {
  Op op;
  const char* name;
  float (*ref)(float);  // in double or long double, rounded to float once
  int ulp_scalar;       // the bounds of docs/accuracy.md
  int ulp_simd;
};

float ref_neg(float x) { return -x; }
float ref_abs(float x) { return std::fabs(x); }
float ref_relu(float x) { return x <= 0.0f ? 0.0f : x; }
float ref_sin(float x) { return static_cast<float>(std::sin(static_cast<double>(x))); }
float ref_cos(float x) { return static_cast<float>(std::cos(static_cast<double>(x))); }
float ref_tan(float x) { return static_cast<float>(std::tan(static_cast<double>(x))); }
float ref_exp(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }
float ref_log(float x) { return static_cast<float>(std::log(static_cast<double>(x))); }
float ref_sqrt(float x) { return static_cast<float>(std::sqrt(static_cast<double>(x))); }
float ref_rsqrt(float x) {
  return static_cast<float>(1.0L / std::sqrt(static_cast<long double>(x)));
}
float ref_tanh(float x) { return static_cast<float>(std::tanh(static_cast<double>(x))); }
float ref_sigmoid(float x) {
  return static_cast<float>(1.0L / (1.0L + std::exp(-static_cast<long double>(x))));
}
float ref_silu(float x) {
  const long double xl = x;
  return static_cast<float>(xl / (1.0L + std::exp(-xl)));
}
float ref_erf(float x) { return static_cast<float>(std::erf(static_cast<long double>(x))); }
float ref_gelu(float x) {
  if (std::isinf(x) && x < 0) return -0.0f;  // the limit (the formula gives -inf * 0)
  const long double xl = x;
  return static_cast<float>(0.5L * xl * std::erfc(-xl / std::sqrt(2.0L)));
}

// Bounds as docs/accuracy.md: the worst error over all 2^32 floats, measured once with an
// exhaustive run (glibc 2.39 for the scalar table), which this sweep samples.
const UnarySpec kUnary[] = {
    {Op::neg, "neg", ref_neg, 0, 0},       {Op::abs, "abs", ref_abs, 0, 0},
    {Op::relu, "relu", ref_relu, 0, 0},    {Op::sqrt, "sqrt", ref_sqrt, 0, 0},
    {Op::rsqrt, "rsqrt", ref_rsqrt, 0, 1}, {Op::sin, "sin", ref_sin, 1, 2},
    {Op::cos, "cos", ref_cos, 1, 2},       {Op::tan, "tan", ref_tan, 1, 1},
    {Op::exp, "exp", ref_exp, 1, 1},       {Op::log, "log", ref_log, 1, 1},
    {Op::tanh, "tanh", ref_tanh, 2, 3},    {Op::sigmoid, "sigmoid", ref_sigmoid, 1, 3},
    {Op::gelu, "gelu", ref_gelu, 1, 1},    {Op::silu, "silu", ref_silu, 1, 1},
    {Op::erf, "erf", ref_erf, 1, 1},
};

class KernelUnaryAccuracy : public TableTest {};
INSTANTIATE_TEST_SUITE_P(Tables, KernelUnaryAccuracy, ::testing::ValuesIn(all_tables()),
                         table_name);

// The reference of one op over the sweep, computed once for all tables.
const std::vector<float>& sweep_reference(const UnarySpec& s) {
  static std::vector<std::vector<float>> cache(std::size(kUnary));
  std::vector<float>& r = cache[&s - kUnary];
  if (r.empty()) {
    for (float x : sweep()) r.push_back(s.ref(x));
  }
  return r;
}

// Worst error of one op over the sweep in one order; also checks that a zero result has the
// sign of the reference (sin(-0) = -0, gelu(-20) = -0, ...).
void check_unary(const KernelTable& t, const char* target, const UnarySpec& s, bool shuffled) {
  const int bound = is_simd(t) ? s.ulp_simd : s.ulp_scalar;
  const std::vector<float>& all = sweep();
  const std::vector<float>& ref = sweep_reference(s);
  std::vector<float> x(all.size()), want(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::size_t j = shuffled ? shuffled_order()[i] : i;
    x[i] = all[j];
    want[i] = ref[j];
  }
  const std::vector<float> got = run_unary(t, s.op, x);
  const char* order = shuffled ? "shuffled" : "sorted";
  std::int64_t worst = 0;
  float worst_x = 0;
  int failures = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::int64_t d = ulp_distance(got[i], want[i]);
    const bool zero_sign_ok = want[i] != 0.0f || got[i] != 0.0f || same(got[i], want[i]);
    if (d > worst) worst = d, worst_x = x[i];
    if ((d > bound || !zero_sign_ok) && ++failures <= 5) {
      ADD_FAILURE() << s.name << "[" << target << ", " << order << "](" << x[i] << " = 0x"
                    << std::hex << bits_of(x[i]) << std::dec << ") = " << got[i] << ", reference "
                    << want[i] << ": " << d << " ULP, bound " << bound;
    }
  }
  if (report()) {
    std::printf("  %-8s %-12s %-8s max %lld ULP at %.9g\n", s.name, target, order,
                static_cast<long long>(worst), worst_x);
  }
  EXPECT_EQ(failures, 0) << s.name << " on " << target << ": worst " << worst << " ULP at "
                         << worst_x;
}

TEST_P(KernelUnaryAccuracy, EveryF32OpWithinItsBoundOverTheWholeRange) {
  for (const UnarySpec& s : kUnary) {
    check_unary(table(), target(), s, false);
    check_unary(table(), target(), s, true);
  }
}

// KILN_EXHAUSTIVE=sin,cos (op names, comma-separated) checks those ops on all 2^32 float bit
// patterns, as docs/accuracy.md's bounds were measured; a few minutes per op and table, so pick
// a table with --gtest_filter. Skipped when the variable is unset.
TEST_P(KernelUnaryAccuracy, ExhaustiveWhenAsked) {
  const char* env = std::getenv("KILN_EXHAUSTIVE");
  if (env == nullptr) GTEST_SKIP() << "set KILN_EXHAUSTIVE=sin,cos,... to sweep every float";
  const std::string wanted = std::string(",") + env + ",";
  const KernelTable& t = table();
  int swept = 0;
  for (const UnarySpec& s : kUnary) {
    if (wanted.find(std::string(",") + s.name + ",") == std::string::npos) continue;
    ++swept;
    const int bound = is_simd(t) ? s.ulp_simd : s.ulp_scalar;
    constexpr std::uint64_t kChunk = std::uint64_t{1} << 20;
    std::vector<float> x(kChunk);
    std::int64_t worst = 0, over_half = 0, at_bound = 0;
    float worst_x = 0;
    int failures = 0;
    for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += kChunk) {
      for (std::uint64_t i = 0; i < kChunk; ++i)
        x[i] = from_bits(static_cast<std::uint32_t>(b + i));
      const std::vector<float> got = run_unary(t, s.op, x);
      for (std::uint64_t i = 0; i < kChunk; ++i) {
        const float want = s.ref(x[i]);
        // The two NaN inputs whose quiet form is the poison: any NaN result is right for them.
        if ((bits_of(x[i]) | 0x00400000u) == kPoison && std::isnan(got[i])) continue;
        const std::int64_t d = ulp_distance(got[i], want);
        const bool zero_sign_ok = want != 0.0f || got[i] != 0.0f || same(got[i], want);
        if (d > worst) worst = d, worst_x = x[i];
        over_half += d >= 1;
        at_bound += d >= bound && bound > 0;
        if ((d > bound || !zero_sign_ok) && ++failures <= 5) {
          ADD_FAILURE() << s.name << "[" << target() << "](" << x[i] << " = 0x" << std::hex
                        << bits_of(x[i]) << std::dec << ") = " << got[i] << ", reference " << want
                        << ": " << d << " ULP, bound " << bound;
        }
      }
    }
    std::printf(
        "  %-8s %-12s all 2^32: max %lld ULP at %.9g; %lld floats >= 1 ULP, %lld at the "
        "bound %d\n",
        s.name, target(), static_cast<long long>(worst), worst_x, static_cast<long long>(over_half),
        static_cast<long long>(at_bound), bound);
    EXPECT_EQ(failures, 0) << s.name << " on " << target() << ": worst " << worst << " ULP at "
                           << worst_x;
  }
  EXPECT_GT(swept, 0) << "KILN_EXHAUSTIVE=" << env << " names no unary f32 op";
}

// Values that the sweep may miss, each checked exactly (the sign of zero included).
TEST_P(KernelUnaryAccuracy, SpecialValuesMatchStd) {
  const KernelTable& t = table();
  struct Case {
    Op op;
    float x, want;
  };
  const Case cases[] = {
      {Op::exp, -kInf, 0.0f},    {Op::exp, kInf, kInf},     {Op::exp, kNaN, kNaN},
      {Op::exp, 89.0f, kInf},    {Op::exp, 0.0f, 1.0f},     {Op::exp, -0.0f, 1.0f},
      {Op::exp, -110.0f, 0.0f},  {Op::log, 0.0f, -kInf},    {Op::log, -0.0f, -kInf},
      {Op::log, -1.0f, kNaN},    {Op::log, -kInf, kNaN},    {Op::log, kInf, kInf},
      {Op::log, kNaN, kNaN},     {Op::log, 1.0f, 0.0f},     {Op::sqrt, -1.0f, kNaN},
      {Op::sqrt, -0.0f, -0.0f},  {Op::sqrt, kInf, kInf},    {Op::rsqrt, 0.0f, kInf},
      {Op::rsqrt, -0.0f, -kInf}, {Op::rsqrt, kInf, 0.0f},   {Op::rsqrt, -1.0f, kNaN},
      {Op::rsqrt, 4.0f, 0.5f},   {Op::sin, kInf, kNaN},     {Op::sin, -kInf, kNaN},
      {Op::sin, kNaN, kNaN},     {Op::sin, -0.0f, -0.0f},   {Op::sin, 0.0f, 0.0f},
      {Op::cos, kInf, kNaN},     {Op::cos, -0.0f, 1.0f},    {Op::tan, kInf, kNaN},
      {Op::tan, -0.0f, -0.0f},   {Op::tanh, kInf, 1.0f},    {Op::tanh, -kInf, -1.0f},
      {Op::tanh, kNaN, kNaN},    {Op::tanh, -0.0f, -0.0f},  {Op::sigmoid, -kInf, 0.0f},
      {Op::sigmoid, kInf, 1.0f}, {Op::sigmoid, kNaN, kNaN}, {Op::sigmoid, 0.0f, 0.5f},
      {Op::gelu, -kInf, -0.0f},  {Op::gelu, kInf, kInf},    {Op::gelu, kNaN, kNaN},
      {Op::gelu, -0.0f, -0.0f},  {Op::gelu, -20.0f, -0.0f}, {Op::gelu, FLT_MAX, FLT_MAX},
      {Op::relu, kNaN, kNaN},    {Op::relu, -0.0f, 0.0f},   {Op::relu, -kInf, 0.0f},
      {Op::neg, 0.0f, -0.0f},    {Op::abs, -0.0f, 0.0f},    {Op::abs, -kNaN, kNaN},
  };
  for (const Case& c : cases) {
    // Alone and in a full vector of ordinary values, so that both paths see it.
    std::vector<float> x(19, 0.75f);
    x[5] = c.x;
    const std::vector<float> got = run_unary(t, c.op, x);
    EXPECT_TRUE(same(got[5], c.want)) << "op " << int(c.op) << "(" << c.x << ") = " << got[5]
                                      << ", want " << c.want << " on " << target();
    const std::vector<float> one = run_unary(t, c.op, {c.x});
    EXPECT_TRUE(same(one[0], c.want)) << "op " << int(c.op) << "(" << c.x << ") = " << one[0]
                                      << ", want " << c.want << " on " << target();
  }
  // sigmoid(x) ~ exp(x) for very negative x: not flushed to zero where that is a float.
  for (float x : {-80.0f, -87.0f, -88.0f, -95.0f, -100.0f, -103.0f}) {
    const float got = run_unary(t, Op::sigmoid, {x})[0];
    EXPECT_GT(got, 0.0f) << "sigmoid(" << x << ")";
    EXPECT_LE(ulp_distance(got, ref_sigmoid(x)), 3) << "sigmoid(" << x << ")";
  }
}

// ---------------------------------------------------------------------------------------------
// Binary f32

class KernelBinaryF32 : public TableTest {};
INSTANTIATE_TEST_SUITE_P(Tables, KernelBinaryF32, ::testing::ValuesIn(all_tables()), table_name);

// Random bit patterns (NaN and inf included) mixed with the values where ops differ.
std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const float specials[] = {0.0f, -0.0f, kInf, -kInf, kNaN, 1.0f, -1.0f, kDenormMin, FLT_MAX};
  std::vector<float> v(n);
  for (auto& x : v) {
    const std::uint32_t r = rng();
    x = (r % 8 == 0) ? specials[(r >> 3) % std::size(specials)] : from_bits(rng());
  }
  return v;
}

// + - * / are exact in double for float operands, so one rounding gives the IEEE float result.
TEST_P(KernelBinaryF32, ArithmeticIsCorrectlyRounded) {
  const KernelTable& t = table();
  const std::vector<float> a = random_floats(10007, 1), b = random_floats(10007, 2);
  struct Case {
    Op op;
    double (*ref)(double, double);
  };
  const Case cases[] = {{Op::add, [](double x, double y) { return x + y; }},
                        {Op::sub, [](double x, double y) { return x - y; }},
                        {Op::mul, [](double x, double y) { return x * y; }},
                        {Op::div, [](double x, double y) { return x / y; }}};
  for (const Case& c : cases) {
    const std::vector<float> got = run_binary_f(t, c.op, a, b);
    for (std::size_t i = 0; i < a.size(); ++i) {
      const float want = static_cast<float>(c.ref(a[i], b[i]));
      ASSERT_TRUE(same(got[i], want)) << "op " << int(c.op) << "(" << a[i] << ", " << b[i]
                                      << ") = " << got[i] << ", want " << want;
    }
  }
}

TEST_P(KernelBinaryF32, MinimumMaximumPropagateNaNAndOrderSignedZeros) {
  const KernelTable& t = table();
  const std::vector<float> a = {kNaN, 1.0f, kNaN, 0.0f, -0.0f, -0.0f, 0.0f, -kInf, 2.0f, -kNaN};
  const std::vector<float> b = {1.0f, kNaN, kNaN, -0.0f, 0.0f, -0.0f, 0.0f, kInf, -3.0f, 0.0f};
  const std::vector<float> mn = {kNaN, kNaN, kNaN, -0.0f, -0.0f, -0.0f, 0.0f, -kInf, -3.0f, kNaN};
  const std::vector<float> mx = {kNaN, kNaN, kNaN, 0.0f, 0.0f, -0.0f, 0.0f, kInf, 2.0f, kNaN};
  const std::vector<float> got_min = run_binary_f(t, Op::minimum, a, b);
  const std::vector<float> got_max = run_binary_f(t, Op::maximum, a, b);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(same(got_min[i], mn[i])) << "minimum(" << a[i] << ", " << b[i] << ")";
    EXPECT_TRUE(same(got_max[i], mx[i])) << "maximum(" << a[i] << ", " << b[i] << ")";
  }
  // Random operands against the NumPy rule.
  const std::vector<float> ra = random_floats(5003, 3), rb = random_floats(5003, 4);
  const std::vector<float> rmin = run_binary_f(t, Op::minimum, ra, rb);
  const std::vector<float> rmax = run_binary_f(t, Op::maximum, ra, rb);
  for (std::size_t i = 0; i < ra.size(); ++i) {
    const bool nan = std::isnan(ra[i]) || std::isnan(rb[i]);
    const float want_min = nan ? kNaN : (ra[i] < rb[i] ? ra[i] : rb[i]);
    const float want_max = nan ? kNaN : (ra[i] > rb[i] ? ra[i] : rb[i]);
    ASSERT_EQ(ulp_distance(rmin[i], want_min), 0) << ra[i] << ", " << rb[i];
    ASSERT_EQ(ulp_distance(rmax[i], want_max), 0) << ra[i] << ", " << rb[i];
  }
}

TEST_P(KernelBinaryF32, ComparisonsFollowIeee) {
  const KernelTable& t = table();
  std::vector<float> a = random_floats(4099, 5);
  std::vector<float> b = random_floats(4099, 6);
  for (std::size_t i = 0; i < b.size(); i += 3) b[i] = a[i];  // equal pairs, NaN == NaN too
  b[1] = -0.0f;
  a[1] = 0.0f;
  struct Case {
    Op op;
    bool (*ref)(float, float);
  };
  const Case cases[] = {{Op::eq, [](float x, float y) { return x == y; }},
                        {Op::ne, [](float x, float y) { return x != y; }},
                        {Op::lt, [](float x, float y) { return x < y; }},
                        {Op::le, [](float x, float y) { return x <= y; }},
                        {Op::gt, [](float x, float y) { return x > y; }},
                        {Op::ge, [](float x, float y) { return x >= y; }}};
  for (const Case& c : cases) {
    auto out = poisoned<i32>(a.size());
    t.binary(c.op, DType::f32, Lanes{a.data()}, Lanes{b.data()}, out.data(), a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(out[i], i32{c.ref(a[i], b[i])})
          << "op " << int(c.op) << "(" << a[i] << ", " << b[i] << ") on " << target();
    }
  }
}

// pow: a grid of bases (every sign, zero, subnormal, inf, NaN) and exponents (integers of both
// parities, halves, huge, inf, NaN), then random in-range pairs, against double std::pow.
TEST_P(KernelBinaryF32, PowMatchesStdPowEverywhere) {
  const KernelTable& t = table();
  const int bound = 1;
  std::vector<float> xs;
  for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += 1000003) {
    xs.push_back(from_bits(static_cast<std::uint32_t>(b)));
  }
  for (float v : {0.0f, -0.0f, 1.0f, -1.0f, kInf, -kInf, kNaN, 2.0f, -2.0f, 0.5f, kDenormMin,
                  -kDenormMin, FLT_MAX, 1.0000001f, 0.99999994f}) {
    xs.push_back(v);
  }
  const float ys[] = {0.0f, -0.0f, 1.0f,  -1.0f,  2.0f,    -2.0f, 3.0f,   -3.0f, 0.5f,    -0.5f,
                      2.5f, 1e-3f, 7.0f,  100.0f, -100.0f, 1e10f, -1e10f, 1e30f, kInf,    -kInf,
                      kNaN, 0.1f,  -0.1f, 127.0f, -149.0f, 33.3f, 1.5f,   -1.5f, FLT_MAX, 4.0f};
  std::vector<float> a, b;
  for (float x : xs) {
    for (float y : ys) a.push_back(x), b.push_back(y);
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> lx(-40.0f, 40.0f), ly(-60.0f, 60.0f);
  for (int i = 0; i < 100000; ++i) a.push_back(std::exp2(lx(rng))), b.push_back(ly(rng));
  const std::vector<float> got = run_binary_f(t, Op::pow, a, b);
  std::int64_t worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const float want = static_cast<float>(std::pow(double{a[i]}, double{b[i]}));
    const std::int64_t d = ulp_distance(got[i], want);
    worst = std::max(worst, d);
    const bool zero_sign_ok = want != 0.0f || same(got[i], want);
    ASSERT_TRUE(d <= bound && zero_sign_ok) << "pow(" << a[i] << ", " << b[i] << ") = " << got[i]
                                            << ", want " << want << " on " << target();
  }
  if (report()) std::printf("  pow      %-12s pairs    max %lld ULP\n", target(), (long long)worst);
}

// A splat exponent takes shortcuts for 2, 1, 0, 0.5 and -1: same results as std::pow.
TEST_P(KernelBinaryF32, PowWithSplatExponent) {
  const KernelTable& t = table();
  const std::vector<float>& x = sweep();
  for (float y : {2.0f, 1.0f, 0.0f, -0.0f, 0.5f, -1.0f, 3.0f, -0.5f, kNaN}) {
    auto out = poisoned<float>(x.size());
    t.binary(Op::pow, DType::f32, Lanes{x.data()}, Lanes{&y, true}, out.data(), x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float want = static_cast<float>(std::pow(double{x[i]}, double{y}));
      ASSERT_LE(ulp_distance(out[i], want), 1) << "pow(" << x[i] << ", " << y << ") = " << out[i];
      ASSERT_TRUE(want != 0.0f || same(out[i], want)) << "pow(" << x[i] << ", " << y << ")";
    }
  }
  // A splat base with a vector exponent.
  const float two = 2.0f;
  const std::vector<float> e = {-150.0f, -149.0f, -1.0f, 0.0f, 0.5f, 10.0f, 127.0f, 128.0f, kNaN};
  auto out = poisoned<float>(e.size());
  t.binary(Op::pow, DType::f32, Lanes{&two, true}, Lanes{e.data()}, out.data(), e.size());
  for (std::size_t i = 0; i < e.size(); ++i) {
    // pow(2, -150) is a tie between 0 and the smallest subnormal: within 1 ULP.
    EXPECT_LE(ulp_distance(out[i], std::pow(2.0f, e[i])), 1) << "pow(2, " << e[i] << ")";
  }
}

// ---------------------------------------------------------------------------------------------
// i32 and bool

class KernelIntOps : public TableTest {};
INSTANTIATE_TEST_SUITE_P(Tables, KernelIntOps, ::testing::ValuesIn(all_tables()), table_name);

std::vector<i32> random_ints(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const i32 specials[] = {0, 1, -1, kIntMax, kIntMin, kIntMax - 1, kIntMin + 1, 65536, -65536};
  std::vector<i32> v(n);
  for (auto& x : v) {
    const std::uint32_t r = rng();
    x = (r % 4 == 0) ? specials[(r >> 2) % std::size(specials)] : static_cast<i32>(rng());
  }
  return v;
}

TEST_P(KernelIntOps, ArithmeticWraps) {
  const KernelTable& t = table();
  const std::vector<i32> a = random_ints(1003, 8), b = random_ints(1003, 9);
  auto wrap = [](std::int64_t v) { return static_cast<i32>(static_cast<std::uint32_t>(v)); };
  struct Case {
    Op op;
    std::int64_t (*ref)(std::int64_t, std::int64_t);
  };
  const Case cases[] = {
      {Op::add, [](std::int64_t x, std::int64_t y) { return x + y; }},
      {Op::sub, [](std::int64_t x, std::int64_t y) { return x - y; }},
      {Op::mul, [](std::int64_t x, std::int64_t y) { return x * y; }},
      {Op::minimum, [](std::int64_t x, std::int64_t y) { return std::min(x, y); }},
      {Op::maximum, [](std::int64_t x, std::int64_t y) { return std::max(x, y); }},
  };
  for (const Case& c : cases) {
    auto out = poisoned<i32>(a.size());
    t.binary(c.op, DType::i32, Lanes{a.data()}, Lanes{b.data()}, out.data(), a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(out[i], wrap(c.ref(a[i], b[i])))
          << "op " << int(c.op) << "(" << a[i] << ", " << b[i] << ")";
    }
  }
  // INT_MAX + 1 and INT_MIN - 1 with splat operands on either side.
  const i32 one = 1, max = kIntMax, min = kIntMin;
  i32 r = 0;
  t.binary(Op::add, DType::i32, Lanes{&max, true}, Lanes{&one, true}, &r, 1);
  EXPECT_EQ(r, kIntMin);
  t.binary(Op::sub, DType::i32, Lanes{&min}, Lanes{&one, true}, &r, 1);
  EXPECT_EQ(r, kIntMax);
  t.binary(Op::mul, DType::i32, Lanes{&max, true}, Lanes{&max}, &r, 1);
  EXPECT_EQ(r, 1);
}

TEST_P(KernelIntOps, UnaryWrapsAtIntMin) {
  const KernelTable& t = table();
  const std::vector<i32> x = {0, 5, -5, kIntMax, kIntMin, kIntMin + 1, -1, 1, 7, -7, 100, -100};
  auto run = [&](Op op) {
    auto out = poisoned<i32>(x.size());
    t.unary(op, DType::i32, DType::i32, Lanes{x.data()}, out.data(), x.size());
    return out;
  };
  const auto neg = run(Op::neg), abs = run(Op::abs), relu = run(Op::relu);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::int64_t v = x[i];
    EXPECT_EQ(neg[i], static_cast<i32>(static_cast<std::uint32_t>(-v))) << x[i];
    EXPECT_EQ(abs[i], static_cast<i32>(static_cast<std::uint32_t>(v < 0 ? -v : v))) << x[i];
    EXPECT_EQ(relu[i], x[i] < 0 ? 0 : x[i]) << x[i];
  }
  EXPECT_EQ(neg[4], kIntMin);
  EXPECT_EQ(abs[4], kIntMin);
}

TEST_P(KernelIntOps, ComparisonsOnI32AndBool) {
  const KernelTable& t = table();
  std::vector<i32> a = random_ints(1001, 10), b = random_ints(1001, 11);
  for (std::size_t i = 0; i < a.size(); i += 4) b[i] = a[i];
  struct Case {
    Op op;
    bool (*ref)(i32, i32);
  };
  const Case cases[] = {
      {Op::eq, [](i32 x, i32 y) { return x == y; }}, {Op::ne, [](i32 x, i32 y) { return x != y; }},
      {Op::lt, [](i32 x, i32 y) { return x < y; }},  {Op::le, [](i32 x, i32 y) { return x <= y; }},
      {Op::gt, [](i32 x, i32 y) { return x > y; }},  {Op::ge, [](i32 x, i32 y) { return x >= y; }}};
  std::vector<i32> ba(a.size()), bb(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) ba[i] = a[i] & 1, bb[i] = (b[i] >> 3) & 1;
  for (const Case& c : cases) {
    auto out = poisoned<i32>(a.size());
    t.binary(c.op, DType::i32, Lanes{a.data()}, Lanes{b.data()}, out.data(), a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(out[i], i32{c.ref(a[i], b[i])}) << "op " << int(c.op) << a[i] << ", " << b[i];
    }
    t.binary(c.op, DType::boolean, Lanes{ba.data()}, Lanes{bb.data()}, out.data(), a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(out[i], i32{c.ref(ba[i], bb[i])}) << "bool op " << int(c.op);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// KernelCasts

class KernelCasts : public TableTest {};
INSTANTIATE_TEST_SUITE_P(Tables, KernelCasts, ::testing::ValuesIn(all_tables()), table_name);

TEST_P(KernelCasts, F32ToI32TruncatesAndSaturates) {
  const KernelTable& t = table();
  struct Case {
    float x;
    i32 want;
  };
  const Case cases[] = {
      {2147483648.0f, kIntMax},
      {-2147483648.0f, kIntMin},
      {-2147483649.0f, kIntMin},
      {-2147483904.0f, kIntMin},
      {2147483520.0f, 2147483520},
      {-2147483520.0f, -2147483520},
      {kNaN, 0},
      {-kNaN, 0},
      {kInf, kIntMax},
      {-kInf, kIntMin},
      {0.9999f, 0},
      {-0.5f, 0},
      {-0.9999f, 0},
      {1.5f, 1},
      {-1.5f, -1},
      {2.5f, 2},
      {1e10f, kIntMax},
      {-1e10f, kIntMin},
      {FLT_MAX, kIntMax},
      {-FLT_MAX, kIntMin},
      {kDenormMin, 0},
      {-0.0f, 0},
      {16777217.0f, 16777216},
      {-123456.789f, -123456},
  };
  std::vector<float> x;
  for (const Case& c : cases) x.push_back(c.x);
  auto out = poisoned<i32>(x.size());
  t.unary(Op::cast, DType::f32, DType::i32, Lanes{x.data()}, out.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(out[i], cases[i].want) << cases[i].x;
  // In place: out is the input array.
  std::vector<float> inplace = x;
  t.unary(Op::cast, DType::f32, DType::i32, Lanes{inplace.data()}, inplace.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    i32 v;
    std::memcpy(&v, &inplace[i], sizeof v);
    EXPECT_EQ(v, cases[i].want) << cases[i].x << " in place";
  }
  // The whole sweep against the rule.
  const std::vector<float>& s = sweep();
  auto all = poisoned<i32>(s.size());
  t.unary(Op::cast, DType::f32, DType::i32, Lanes{s.data()}, all.data(), s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const double v = s[i];
    const i32 want = std::isnan(v)        ? 0
                     : v >= 2147483648.0  ? kIntMax
                     : v <= -2147483648.0 ? kIntMin
                                          : static_cast<i32>(std::trunc(v));
    ASSERT_EQ(all[i], want) << s[i];
  }
}

TEST_P(KernelCasts, OtherDirections) {
  const KernelTable& t = table();
  const std::vector<i32> xi = {0, 1, -1, kIntMax, kIntMin, 16777217, 16777219, -16777217, 3, 9};
  auto f = poisoned<float>(xi.size());
  t.unary(Op::cast, DType::i32, DType::f32, Lanes{xi.data()}, f.data(), xi.size());
  for (std::size_t i = 0; i < xi.size(); ++i) EXPECT_EQ(f[i], static_cast<float>(xi[i]));
  EXPECT_EQ(f[3], 2147483648.0f);
  EXPECT_EQ(f[5], 16777216.0f);  // ties to even
  EXPECT_EQ(f[6], 16777220.0f);

  auto bi = poisoned<i32>(xi.size());
  t.unary(Op::cast, DType::i32, DType::boolean, Lanes{xi.data()}, bi.data(), xi.size());
  for (std::size_t i = 0; i < xi.size(); ++i) EXPECT_EQ(bi[i], i32{xi[i] != 0});

  const std::vector<float> xf = {0.0f, -0.0f, kNaN, kDenormMin, -1.0f, kInf, 0.5f, 0.0f, 2.0f};
  auto bf = poisoned<i32>(xf.size());
  t.unary(Op::cast, DType::f32, DType::boolean, Lanes{xf.data()}, bf.data(), xf.size());
  const i32 want_bf[] = {0, 0, 1, 1, 1, 1, 1, 0, 1};
  for (std::size_t i = 0; i < xf.size(); ++i) EXPECT_EQ(bf[i], want_bf[i]) << xf[i];

  const std::vector<i32> xb = {0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0};
  auto fb = poisoned<float>(xb.size());
  auto ib = poisoned<i32>(xb.size());
  t.unary(Op::cast, DType::boolean, DType::f32, Lanes{xb.data()}, fb.data(), xb.size());
  t.unary(Op::cast, DType::boolean, DType::i32, Lanes{xb.data()}, ib.data(), xb.size());
  for (std::size_t i = 0; i < xb.size(); ++i) {
    EXPECT_EQ(fb[i], static_cast<float>(xb[i]));
    EXPECT_EQ(ib[i], xb[i]);
  }
  // Same dtype: a copy of the bits (NaN payloads too), splat or not.
  const std::vector<float> src = {kNaN, -0.0f, 1.0f, FLT_MAX, kDenormMin};
  auto cp = poisoned<float>(src.size());
  t.unary(Op::cast, DType::f32, DType::f32, Lanes{src.data()}, cp.data(), src.size());
  for (std::size_t i = 0; i < src.size(); ++i) EXPECT_EQ(bits_of(cp[i]), bits_of(src[i]));
  t.unary(Op::cast, DType::f32, DType::f32, Lanes{&src[1], true}, cp.data(), src.size());
  for (float v : cp) EXPECT_EQ(bits_of(v), bits_of(-0.0f));
}

// ---------------------------------------------------------------------------------------------
// Splats, tails, aliasing, where

class KernelShapes : public TableTest {};
INSTANTIATE_TEST_SUITE_P(Tables, KernelShapes, ::testing::ValuesIn(all_tables()), table_name);

// Every length around the vector widths: results right, nothing written past n.
TEST_P(KernelShapes, TailsAndSplats) {
  const KernelTable& t = table();
  constexpr std::size_t kGuard = 32;
  for (std::size_t n : {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 1000, 4096}) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = 0.37f * static_cast<float>(i) - 50.0f;
    const float half = 0.5f, quarter = 0.25f;
    auto out = poisoned<float>(n + kGuard);
    // (x * 0.5 + 0.25).sin().abs(), in place after the first op, as the CPU evaluator runs it.
    t.binary(Op::mul, DType::f32, Lanes{x.data()}, Lanes{&half, true}, out.data(), n);
    t.binary(Op::add, DType::f32, Lanes{out.data()}, Lanes{&quarter, true}, out.data(), n);
    t.unary(Op::sin, DType::f32, DType::f32, Lanes{out.data()}, out.data(), n);
    t.unary(Op::abs, DType::f32, DType::f32, Lanes{out.data()}, out.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      const float want = std::fabs(ref_sin(x[i] * 0.5f + 0.25f));
      ASSERT_LE(ulp_distance(out[i], want), 2) << "n " << n << " i " << i;
    }
    for (std::size_t i = n; i < n + kGuard; ++i) ASSERT_EQ(bits_of(out[i]), kPoison) << n;

    // A splat on the left, and both splats.
    auto out2 = poisoned<float>(n + kGuard);
    t.binary(Op::sub, DType::f32, Lanes{&half, true}, Lanes{x.data()}, out2.data(), n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out2[i], 0.5f - x[i]);
    t.binary(Op::div, DType::f32, Lanes{&half, true}, Lanes{&quarter, true}, out2.data(), n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out2[i], 2.0f);
    t.unary(Op::exp, DType::f32, DType::f32, Lanes{&half, true}, out2.data(), n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_LE(ulp_distance(out2[i], ref_exp(0.5f)), 1);
    for (std::size_t i = n; i < n + kGuard; ++i) ASSERT_EQ(bits_of(out2[i]), kPoison) << n;
  }
  // n = 0 with no memory at all.
  t.unary(Op::sin, DType::f32, DType::f32, Lanes{nullptr}, nullptr, 0);
  t.binary(Op::add, DType::i32, Lanes{nullptr}, Lanes{nullptr}, nullptr, 0);
  t.where(DType::f32, Lanes{nullptr}, Lanes{nullptr}, Lanes{nullptr}, nullptr, 0);
}

TEST_P(KernelShapes, WhereSelectsBitsForEveryDtypeAndSplat) {
  const KernelTable& t = table();
  for (std::size_t n : {1, 7, 17, 1000}) {
    std::vector<i32> cond(n), a(n), b(n);
    for (std::size_t i = 0; i < n; ++i) {
      cond[i] = (i * 7 + 3) % 5 < 2;
      a[i] = static_cast<i32>(i * 2654435761u);
      b[i] = -static_cast<i32>(i);
    }
    const i32 sa = 111, sb = -222, yes = 1, no = 0;
    for (DType dt : {DType::f32, DType::i32, DType::boolean}) {
      for (int mode = 0; mode < 4; ++mode) {
        const bool splat_a = mode & 1, splat_b = mode & 2;
        auto out = poisoned<i32>(n + 8);
        t.where(dt, Lanes{cond.data()}, splat_a ? Lanes{&sa, true} : Lanes{a.data()},
                splat_b ? Lanes{&sb, true} : Lanes{b.data()}, out.data(), n);
        for (std::size_t i = 0; i < n; ++i) {
          const i32 want = cond[i] ? (splat_a ? sa : a[i]) : (splat_b ? sb : b[i]);
          ASSERT_EQ(out[i], want) << "n " << n << " i " << i << " mode " << mode;
        }
        for (std::size_t i = n; i < n + 8; ++i) ASSERT_EQ(std::uint32_t(out[i]), kPoison);
      }
      // A splat condition picks one operand whole.
      auto out = poisoned<i32>(n);
      t.where(dt, Lanes{&yes, true}, Lanes{a.data()}, Lanes{&sb, true}, out.data(), n);
      EXPECT_EQ(out, a);
      t.where(dt, Lanes{&no, true}, Lanes{a.data()}, Lanes{&sb, true}, out.data(), n);
      EXPECT_EQ(out, std::vector<i32>(n, sb));
    }
    // Any nonzero condition lane counts as true; out may be a.
    std::vector<i32> c2(n, 0);
    for (std::size_t i = 0; i < n; i += 3) c2[i] = 5;
    std::vector<i32> inplace = a;
    t.where(DType::i32, Lanes{c2.data()}, Lanes{inplace.data()}, Lanes{b.data()}, inplace.data(),
            n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(inplace[i], c2[i] ? a[i] : b[i]);
  }
}

// ---------------------------------------------------------------------------------------------
// KernelErrors and identity

class KernelErrors : public TableTest {};
INSTANTIATE_TEST_SUITE_P(Tables, KernelErrors, ::testing::ValuesIn(all_tables()), table_name);

TEST_P(KernelErrors, UnsupportedCombinationsThrowDTypeError) {
  const KernelTable& t = table();
  const i32 x[4] = {1, 2, 3, 4};
  i32 out[4];
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const kiln::DTypeError& e) {
      return e.what();
    }
    return "(no DTypeError)";
  };
  auto un = [&](Op op, DType in, DType out_t) {
    return message([&] { t.unary(op, in, out_t, Lanes{x}, out, 4); });
  };
  auto bin = [&](Op op, DType in) {
    return message([&] { t.binary(op, in, Lanes{x}, Lanes{x}, out, 4); });
  };
  std::string m = un(Op::sin, DType::i32, DType::i32);
  EXPECT_NE(m.find("sin"), std::string::npos) << m;
  EXPECT_NE(m.find("i32"), std::string::npos) << m;
  m = bin(Op::div, DType::i32);
  EXPECT_NE(m.find("div"), std::string::npos) << m;
  EXPECT_NE(m.find("i32"), std::string::npos) << m;
  m = un(Op::neg, DType::boolean, DType::boolean);
  EXPECT_NE(m.find("neg"), std::string::npos) << m;
  EXPECT_NE(m.find("bool"), std::string::npos) << m;
  EXPECT_NE(un(Op::gelu, DType::boolean, DType::boolean), "(no DTypeError)");
  EXPECT_NE(un(Op::exp, DType::f32, DType::i32), "(no DTypeError)");
  EXPECT_NE(bin(Op::pow, DType::i32), "(no DTypeError)");
  EXPECT_NE(bin(Op::add, DType::boolean), "(no DTypeError)");
  EXPECT_NE(bin(Op::maximum, DType::boolean), "(no DTypeError)");
  // An op of the wrong arity is kiln's own bug (no public op asks for one): an InternalError.
  EXPECT_THROW(t.unary(Op::add, DType::f32, DType::f32, Lanes{x}, out, 4), kiln::InternalError);
  EXPECT_THROW(t.binary(Op::sin, DType::f32, Lanes{x}, Lanes{x}, out, 4), kiln::InternalError);
  EXPECT_THROW(t.where(static_cast<DType>(7), Lanes{x}, Lanes{x}, Lanes{x}, out, 4),
               kiln::DTypeError);
}

TEST(KernelTables, TargetNames) {
  EXPECT_STREQ(kiln::cpu::scalar_kernels().target(), "scalar");
#if KILN_WITH_SIMD
  const std::string target = kiln::cpu::simd_kernels().target();
  EXPECT_FALSE(target.empty());
  EXPECT_NE(target, "scalar");
  for (char c : target) EXPECT_FALSE(std::isupper(static_cast<unsigned char>(c))) << target;
  EXPECT_EQ(&kiln::cpu::simd_kernels(), &kiln::cpu::simd_kernels());  // one table, any target
#endif
}

}  // namespace
