// kiln::bfloat16 and kiln::float16 (include/kiln/half.hpp) against reference conversions written
// here another way: a half's value from its fields with ldexp, and rounding by searching the
// two nearest halves in double arithmetic. Every one of the 65,536 bit patterns of each type is
// converted to float and back; floats are converted at every half, every midpoint between two
// neighbours (the ties), just beside each midpoint, and on a sweep of all 2^32 bit patterns in
// steps of 997.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kiln/half.hpp"

namespace {

struct Format {
  int mant_bits;  // 7 for bf16, 10 for f16
  int bias;       // 127, 15
  int exp_bits;   // 8, 5
};
constexpr Format kBf16{7, 127, 8}, kF16{10, 15, 5};

// The value of half bits b, from its fields.
double value_of(std::uint16_t b, Format f) {
  const int sign = b >> 15, exp = (b >> f.mant_bits) & ((1 << f.exp_bits) - 1);
  const int mant = b & ((1 << f.mant_bits) - 1);
  double v;
  if (exp == (1 << f.exp_bits) - 1)
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0)
    v = std::ldexp(mant, 1 - f.bias - f.mant_bits);
  else
    v = std::ldexp(mant + (1 << f.mant_bits), exp - f.bias - f.mant_bits);
  return sign ? -v : v;
}

// The half nearest to x (ties to the even pattern), by comparing x with the finite halves of
// its sign in order: the magnitudes of non-negative patterns increase with the pattern.
std::uint16_t round_of(double x, Format f) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  const std::uint16_t inf = static_cast<std::uint16_t>(((1 << f.exp_bits) - 1) << f.mant_bits);
  // Binary search for the largest finite pattern p with value(p) <= a.
  std::uint16_t lo = 0, hi = inf - 1;
  if (a >= value_of(hi, f)) {
    // At or above the largest finite: Inf from its midpoint with the next power of two up.
    const double next = std::ldexp(1.0, (1 << (f.exp_bits - 1)));
    const double mid = (value_of(hi, f) + next) / 2;
    return sign | (a >= mid ? inf : hi);
  }
  while (lo < hi) {
    const std::uint16_t m = static_cast<std::uint16_t>((lo + hi + 1) / 2);
    if (value_of(m, f) <= a)
      lo = m;
    else
      hi = static_cast<std::uint16_t>(m - 1);
  }
  const double below = value_of(lo, f), above = value_of(static_cast<std::uint16_t>(lo + 1), f);
  const double mid = (below + above) / 2;  // exact in double: halves have few bits
  std::uint16_t r = lo;
  if (a > mid || (a == mid && (lo & 1))) r = static_cast<std::uint16_t>(lo + 1);
  return sign | r;
}

template <class H>
std::uint16_t bits_of(float x) {
  return H(x).bits;
}

template <class H>
void check_float(float x, Format f) {
  const std::uint16_t got = bits_of<H>(x);
  if (std::isnan(x)) {
    ASSERT_TRUE(std::isnan(static_cast<float>(H::from_bits(got)))) << x;
    ASSERT_EQ(got >> 15, std::signbit(x) ? 1 : 0) << "NaN keeps its sign";
    return;
  }
  ASSERT_EQ(got, round_of(x, f)) << "x = " << x << " (bits 0x" << std::hex
                                 << std::bit_cast<std::uint32_t>(x) << ")";
}

template <class H>
void every_pattern(Format f) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const double want = value_of(h, f);
    const float got = static_cast<float>(H::from_bits(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << b;
      ASSERT_TRUE(std::isnan(static_cast<float>(H(got)))) << "NaN back to NaN: " << b;
      continue;
    }
    ASSERT_EQ(static_cast<double>(got), want) << "pattern " << b;
    ASSERT_EQ(std::signbit(got), std::signbit(want)) << "pattern " << b;
    ASSERT_EQ(H(got).bits, h) << "round trip of pattern " << b;
    // The midpoint with the next pattern up (of the same sign) and the floats beside it.
    const auto next = static_cast<std::uint16_t>(h + 1);
    const double nv = value_of(next, f);
    if ((h & 0x7fff) + 1 < (((1 << f.exp_bits) - 1) << f.mant_bits) && std::isfinite(nv)) {
      const auto mid = static_cast<float>((want + nv) / 2);  // exact: few bits
      check_float<H>(mid, f);
      check_float<H>(std::nextafter(mid, 0.0f), f);
      check_float<H>(std::nextafter(mid, std::numeric_limits<float>::infinity() *
                                             (std::signbit(mid) ? -1.0f : 1.0f)),
                     f);
    }
  }
}

template <class H>
void float_sweep(Format f) {
  for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += 997)
    check_float<H>(std::bit_cast<float>(static_cast<std::uint32_t>(b)), f);
  for (float x :
       {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max(),
        std::numeric_limits<float>::denorm_min(), 65504.0f, 65519.996f, 65520.0f,
        std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()})
    check_float<H>(x, f);
}

TEST(HalfConversion, Bf16EveryPatternAndEveryTie) { every_pattern<kiln::bfloat16>(kBf16); }
TEST(HalfConversion, F16EveryPatternAndEveryTie) { every_pattern<kiln::float16>(kF16); }
TEST(HalfConversion, Bf16FloatSweep) { float_sweep<kiln::bfloat16>(kBf16); }
TEST(HalfConversion, F16FloatSweep) { float_sweep<kiln::float16>(kF16); }

TEST(HalfConversion, NamedValues) {
  EXPECT_EQ(kiln::float16(65504.0f).bits, 0x7bff);               // the largest f16
  EXPECT_EQ(kiln::float16(65520.0f).bits, 0x7c00);               // its tie with 65536 rounds to Inf
  EXPECT_EQ(kiln::float16(std::ldexp(1.0f, -24)).bits, 0x0001);  // the smallest subnormal
  EXPECT_EQ(kiln::bfloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(kiln::bfloat16(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds to Inf
  EXPECT_EQ(static_cast<float>(kiln::bfloat16::from_bits(0x4049)), 3.140625f);
}

}  // namespace
