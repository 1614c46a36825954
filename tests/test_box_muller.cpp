// kiln's float Box-Muller (src/ir/box_muller.cuh), which the CPU and CUDA random kernels share:
// -log u, sin and cos of a turn, and the normals themselves, each against a long double
// reference over a sweep of every 65521st word (65,550 words: every octant, every binade of u)
// and the edge words, in float ULPs of the reference. The bounds are docs/accuracy.md's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/box_muller.cuh"

namespace {

constexpr long double kPi = 3.141592653589793238462643383279502884L;
constexpr long double k2Pow32 = 4294967296.0L;

// |got - ref| in units of the float spacing at |ref|; a reference below 2^-40 counts as 2^-40,
// since the float path gives exact zeros where the long double reference gives +-2^-64 (an
// angle of exactly pi/2 after pi's rounding).
double ulps(float got, long double ref) {
  const long double mag = std::max(std::fabs(ref), std::ldexp(1.0L, -40));
  const long double ulp = std::ldexp(1.0L, std::ilogb(mag) - 23);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - ref) / ulp);
}

// The sweep, plus the words where a branch or an octant begins or ends.
std::vector<std::uint32_t> words() {
  std::vector<std::uint32_t> w;
  for (std::uint64_t v = 0; v <= 0xffffffffu; v += 65521)
    w.push_back(static_cast<std::uint32_t>(v));
  for (std::uint32_t o = 0; o < 8; ++o) {
    for (std::int64_t d : {-2, -1, 0, 1, 2}) w.push_back(static_cast<std::uint32_t>((o << 29) + d));
  }
  for (std::uint32_t v : {0u, 1u, 2u, 3u, 0x7ffffffeu, 0x7fffffffu, 0x80000000u, 0x80000001u,
                          0xfffffffdu, 0xfffffffeu, 0xffffffffu})
    w.push_back(v);
  return w;
}

struct Worst {
  double ulps = 0;
  std::uint32_t word = 0;
  void take(double e, std::uint32_t w) {
    if (e > ulps) {
      ulps = e;
      word = w;
    }
  }
};
std::string where(const Worst& w) {
  return std::to_string(w.ulps) + " ULP at word " + std::to_string(w.word);
}

TEST(BoxMuller, NegLogUnitWithinTwoAndAHalfUlps) {
  Worst worst;
  for (std::uint32_t w : words()) {
    const long double u = (static_cast<long double>(w) + 1) / k2Pow32;
    const long double ref =
        w >= 0x80000000u ? -std::log1p(-(k2Pow32 - 1 - w) / k2Pow32) : -std::log(u);
    const float got = kiln::dev::neg_log_unit(w);
    if (w == 0xffffffffu) {
      EXPECT_EQ(got, 0.0f);
    }
    worst.take(ulps(got, ref), w);
  }
  EXPECT_LE(worst.ulps, 2.5) << where(worst);
}

TEST(BoxMuller, SinCosOfATurnWithinTwoAndAHalfUlps) {
  Worst ws, wc;
  for (std::uint32_t w : words()) {
    const long double t = 2 * kPi * (static_cast<long double>(w) / k2Pow32);
    float s, c;
    kiln::dev::sincos_turn(w, s, c);
    ws.take(ulps(s, std::sin(t)), w);
    wc.take(ulps(c, std::cos(t)), w);
  }
  EXPECT_LE(ws.ulps, 2.5) << "sin: " << where(ws);
  EXPECT_LE(wc.ulps, 2.5) << "cos: " << where(wc);
}

// Both words swept together (word pairs (w, w * 2654435761) reach every octant from every u).
TEST(BoxMuller, NormalsWithinFourUlps) {
  Worst w0, w1;
  for (std::uint32_t a : words()) {
    const std::uint32_t b = a * 2654435761u;
    const long double u = (static_cast<long double>(a) + 1) / k2Pow32;
    const long double r = std::sqrt(-2 * std::log(u));
    const long double t = 2 * kPi * (static_cast<long double>(b) / k2Pow32);
    float z0, z1;
    kiln::dev::box_muller(a, b, z0, z1);
    w0.take(ulps(z0, r * std::cos(t)), a);
    w1.take(ulps(z1, r * std::sin(t)), a);
  }
  EXPECT_LE(w0.ulps, 4.0) << "r cos t: " << where(w0);
  EXPECT_LE(w1.ulps, 4.0) << "r sin t: " << where(w1);
}

}  // namespace
