// kiln's float math for CUDA: gelu, sigmoid, silu and the exponential they share, sin and cos, in
// float arithmetic only (no double, no CUDA math-library call), so that they run at memory speed
// and give the same bits wherever IEEE float operations do. Accuracy: docs/accuracy.md.
//
// CUDA C compiled by NVRTC at run time: cmake/KilnEmbed.cmake embeds this file, and
// ir::cuda_prelude() puts it before src/ir/cuda_prelude.cuh (whose gelu, sigmoid and silu call
// it). The same text also compiles as host C++ (tests/test_cuda_math.cpp includes it): every
// operation is an IEEE float operation, a fused multiply-add or an integer operation, so the host
// computes the device's bits and can check the bounds over every float without a GPU. Plain
// `a * b + c` never fuses: NVRTC runs with --fmad=false and the host with -ffp-contract=off.
#ifndef KILN_CUDA_MATH_CUH
#define KILN_CUDA_MATH_CUH
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define KILN_MATH_FN __device__ __forceinline__
#define KILN_FMAF(a, b, c) __fmaf_rn(a, b, c)
#define KILN_FLOAT_BITS(f) __float_as_uint(f)
#define KILN_BITS_FLOAT(u) __uint_as_float(u)
#else
#include <cmath>
#include <cstring>
#define KILN_MATH_FN inline
#define KILN_FMAF(a, b, c) std::fma(a, b, c)
#define KILN_FLOAT_BITS(f) ::kiln::dev::float_bits(f)
#define KILN_BITS_FLOAT(u) ::kiln::dev::bits_float(u)
#endif

namespace kiln {
namespace dev {
#if !(defined(__CUDACC_RTC__) || defined(__CUDACC__))
inline unsigned float_bits(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
#endif

// exp(x) = p * 2^k for x in [-126, 88], NaN giving a NaN p. k = round(x / ln 2), r = x - k ln 2
// in two fused steps (Cody-Waite, ln 2 split so that k * ln2_hi is exact), |r| <= 0.347, and
// exp(r) = 1 + r (1 + r U(r)) with U of degree 4, fitted for kiln (float coefficients, relative
// error 0.06 ULP on [-0.347, 0.347]). p + lo is within about 0.6 ULP of exp(r), p alone 1.2.
KILN_MATH_FN float exp_parts(float x, int& k, float& lo) {
  const float j = KILN_FMAF(x, 1.44269502f, 12582912.0f);  // 1.5 * 2^23 + round(x / ln 2)
  const float kf = j - 12582912.0f;
  k = (int)(KILN_FLOAT_BITS(j) & 0x7fffffu) - 0x400000;  // j's mantissa holds 2^22 + k
  float r = KILN_FMAF(kf, -0.693145752f, x);             // 0x1.62e4p-1: 17 bits, k * ln2_hi exact
  r = KILN_FMAF(kf, -1.42860677e-6f, r);                 // ln 2 - ln2_hi
  float u = KILN_FMAF(1.37453282e-3f, r, 8.36894661e-3f);
  u = KILN_FMAF(u, r, 4.16696481e-2f);
  u = KILN_FMAF(u, r, 1.66665182e-1f);
  u = KILN_FMAF(u, r, 4.99999881e-1f);
  const float v = KILN_FMAF(u, r, 1.0f);
  const float p = KILN_FMAF(v, r, 1.0f);
  lo = KILN_FMAF(v, r, 1.0f - p);  // 1 - p is exact (Sterbenz): p + lo = 1 + v r nearly exactly
  return p;
}

KILN_MATH_FN float exp_parts(float x, int& k) {
  float lo;
  return exp_parts(x, k, lo);
}

// v * 2^k rounded once, for k in [-252, 0] and |v| within a few binades of 1: v * 2^(k - k/2)
// is exact (normal), and the second product rounds once, to a subnormal where it must.
KILN_MATH_FN float scale_pow2(float v, int k) {
  const int k1 = k >> 1, k2 = k - k1;
  return v * KILN_BITS_FLOAT((unsigned)(k1 + 127) << 23) *
         KILN_BITS_FLOAT((unsigned)(k2 + 127) << 23);
}

// sigmoid(x) = 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0, e = exp(-|x|): relative
// accuracy everywhere, subnormal results included (down to x = -103.9); +-inf give 1 and 0.
KILN_MATH_FN float sigmoid_f(float x) {
  const float a = x < 0.0f ? -x : x;
  const float ac = a > 104.0f ? 104.0f : a;  // exp(-104) rounds to 0; NaN stays NaN
  int k;
  const float p = exp_parts(-ac, k);
  const float e = scale_pow2(p, k);
  const float d = 1.0f + e;
  return x < 0.0f ? e / d : 1.0f / d;
}

// silu(x) = x / (1 + exp(-x)). For x < 0 it is (x p / (1 + e)) 2^k with e = p 2^k = exp(x), the
// scaling last, so that a subnormal result rounds once. Below -120 the result is -0 (the exact
// value is below 1e-49); silu(-inf) is NaN, as PyTorch's x / (1 + exp(-x)) gives.
KILN_MATH_FN float silu_f(float x) {
  const float a = x < 0.0f ? -x : x;
  const float ac = a > 120.0f ? 120.0f : a;
  int k;
  const float p = exp_parts(-ac, k);
  const float e = scale_pow2(p, k);
  const float d = 1.0f + e;
  if (!(x < 0.0f)) return x / d;                           // x >= 0 or NaN
  if (x < -120.0f) return a > 3.4e38f ? x * 0.0f : -0.0f;  // -inf * 0 = NaN
  return scale_pow2((x * p) / d, k);
}

// gelu(x) = x Phi(x), exact GELU. With a = |x| and the upper tail Q(a) = 0.5 erfc(a / sqrt 2):
// Phi(x) = Q(a) for x < 0 and 1 - Q(a) for x >= 0 (no cancellation: Q <= 1/2). Q(a) =
// exp(-a^2 / 2) G(a) with G(a) = t P(t - 1/2), t = 5 / (5 + a) in [1/4, 1], and P of degree 10
// fitted for kiln (float coefficients, the constant as two floats; relative error 0.07 ULP).
// a^2 = h + l exactly (one FMA), and
// exp(-a^2/2) = exp(-h/2) (1 - l/2): a itself is exact, so no argument is rounded before erfc
// (the error of rounding -x / sqrt 2 to float would grow as 2 a^2 through erfc). The scaling by
// 2^k comes last, so a subnormal result rounds once. x < -15 gives -0 (the exact value is below
// half the smallest subnormal); gelu(-inf) = -0, gelu(inf) = inf.
KILN_MATH_FN float gelu_f(float x) {
  if (x < -15.0f) return -0.0f;
  const float a = x < 0.0f ? -x : x;
  const float ac = a > 15.0f ? 15.0f : a;  // above 15, Q < 4e-51 leaves x; NaN stays NaN
  const float h = ac * ac;
  const float l = KILN_FMAF(ac, ac, -h);  // h + l = a^2 exactly
  int k;
  float pl;
  const float p = exp_parts(-0.5f * h, k, pl);
  // t = 5 / (5 + a) as t + tl: d + e = 5 + a exactly (Fast2Sum), r = 5 - t d exactly (FMA).
  const float d = 5.0f + ac;
  const float big = ac > 5.0f ? ac : 5.0f, small = ac > 5.0f ? 5.0f : ac;
  const float e = small - (d - big);
  const float t = 5.0f / d;
  const float tl = KILN_FMAF(-t, e, KILN_FMAF(-t, d, 5.0f)) * t * 0.2f;
  const float u = t - 0.5f;  // exact: t is in [1/4, 1]
  float g = KILN_FMAF(1.69452503e-2f, u, -6.21366687e-2f);
  g = KILN_FMAF(g, u, -4.41496708e-2f);
  g = KILN_FMAF(g, u, 7.77144730e-2f);
  g = KILN_FMAF(g, u, 2.66303480e-1f);
  g = KILN_FMAF(g, u, 4.42313671e-1f);
  g = KILN_FMAF(g, u, 5.28062642e-1f);
  g = KILN_FMAF(g, u, 5.01653373e-1f);
  g = KILN_FMAF(g, u, 3.96244526e-1f);
  g = KILN_FMAF(g, u, 2.66153008e-1f);
  g = KILN_FMAF(g, u, 1.53838605e-1f);
  // G(t + tl) = G(t) (1 + lambda tl / t) with lambda = dlog G / dlog t, which a quadratic gives to
  // 0.4 %: so G = P(u) (t + lambda tl).
  const float lambda = KILN_FMAF(KILN_FMAF(2.775437f, u, 2.881032f), u, 1.870310f);
  const float tc = KILN_FMAF(lambda, tl, t);
  const float xtg = (x > 15.0f ? 15.0f : x) * tc * g;  // x - x Q would be inf - inf at inf
  const float xtgp = KILN_FMAF(xtg, p, xtg * KILN_FMAF(-0.5f * l, p, pl));  // x t P exp(-a^2/2)
  const float xq = scale_pow2(xtgp, k);
  return x > 0.0f ? x - xq : xq;  // +-0 and NaN give xq: +-0 and NaN
}

// sin(x) and cos(x) for |x| <= pi/4 (0.785398185): polynomials fitted for kiln on [0, pi/4], max
// 0.69 ULP for sin and 0.55 for cos over every float there (docs/accuracy.md). sin_poly keeps
// the sign of a zero; cos carries x^2 and 1 - x^2/2 as two floats each. With s = x^2:
// sin(x) = x + x s (S0 + s (S1 + s S2)), cos(x) = 1 - s/2 + s^2 (C0 + s (C1 + s C2)).
constexpr float kSin0 = -1.66666538e-1f, kSin1 = 8.33211653e-3f, kSin2 = -1.95096945e-4f;
constexpr float kCos0 = 4.16666456e-2f, kCos1 = -1.38872769e-3f, kCos2 = 2.44287457e-5f;
KILN_MATH_FN float sin_poly(float x) {
  const float s = x * x;
  const float p = KILN_FMAF(KILN_FMAF(kSin2, s, kSin1), s, kSin0);
  return KILN_FMAF(x * s, p, x);
}
KILN_MATH_FN float cos_poly(float x) {
  const float s = x * x;
  const float s_lo = KILN_FMAF(x, x, -s);  // s + s_lo = x * x exactly
  const float hz = 0.5f * s;
  const float a = 1.0f - hz;
  const float e = (1.0f - a) - hz;  // 1 - hz = a + e exactly
  const float q = KILN_FMAF(KILN_FMAF(kCos2, s, kCos1), s, kCos0);
  return a + KILN_FMAF(s * s, q, e - 0.5f * s_lo);
}

// sin(x) (cos_shift 0) or cos(x) (cos_shift 1) for 2^-12 <= |x| <= 39000, by one reduction to
// [-pi/4, pi/4]: n = round(x * 2/pi) from one FMA (1.5 * 2^23 + n, whose low mantissa bits are
// n mod 4: no float-int conversion), r = x - n pi/2 by Cody-Waite with pi/2 in three floats (the
// first step exact for every x here: x and n * hi are multiples of 2^-24 and |r| < 1; for
// n <= 24830 the 1e-23 left over is far below an ULP of the smallest |r|, 4.2e-9 at 252.898209),
// then by quadrant sin(r) = r + r s S(s) or cos(r) = 1 + s C(s) (s = r^2; sin_poly's and
// cos_poly's coefficients) as one polynomial whose coefficients are selected: no branch, so the
// lanes of a warp never diverge and the four elements of a vectorized step interleave. A few ULP
// of float, used where the result is rounded to a half type (src/ir/cuda_half_math.cuh).
KILN_MATH_FN float sin_cos_reduced(float x, unsigned cos_shift) {
  const float j = KILN_FMAF(x, 0x1.45f306p-1f, 12582912.0f);  // 2 / pi
  const float n = j - 12582912.0f;
  float r = KILN_FMAF(n, -0x1.921fb6p0f, x);
  r = KILN_FMAF(n, 0x1.777a5cp-25f, r);
  r = KILN_FMAF(n, 0x1.ee59dap-50f, r);
  const unsigned q = (KILN_FLOAT_BITS(j) + cos_shift) & 3u;
  const bool c = (q & 1u) != 0;
  const float s = r * r;
  float p = c ? kCos2 : 0.0f;
  p = KILN_FMAF(p, s, c ? kCos1 : kSin2);
  p = KILN_FMAF(p, s, c ? kCos0 : kSin1);
  p = KILN_FMAF(p, s, c ? -0.5f : kSin0);
  const float b = c ? 1.0f : r;
  const float v = KILN_FMAF(b * s, p, b);
  return (q & 2u) ? -v : v;
}

}  // namespace dev
}  // namespace kiln
#endif  // KILN_CUDA_MATH_CUH
