// kiln's standard normals: Box-Muller in float, from two Philox words, with the same bits on
// every device. After src/ir/cuda_math.cuh (its macros): src/cuda/random_source.cpp puts both
// before src/cuda/kernels/random.cuh for NVRTC, and src/cpu/random.cpp includes both as host C++.
// Only IEEE float operations (division and square root included, which round correctly on both
// sides), fused multiply-adds and integer operations, so the CPU and CUDA tensors of a seed are
// identical. Accuracy against the float64 Box-Muller of the same words: docs/accuracy.md.
#ifndef KILN_BOX_MULLER_CUH
#define KILN_BOX_MULLER_CUH
#if !(defined(__CUDACC_RTC__) || defined(__CUDACC__))
#include <cstdint>

#include "core/philox.hpp"
#include "ir/cuda_math.cuh"
#define KILN_FDIV(a, b) ((a) / (b))
#define KILN_FSQRT(a) std::sqrt(a)
#else
#define KILN_FDIV(a, b) __fdiv_rn(a, b)
#define KILN_FSQRT(a) __fsqrt_rn(a)
#endif

namespace kiln {
namespace dev {

// log(1 + t) for t in [-0.5, 1]: 2 atanh(s) with s = t / (2 + t) in [-1/3, 1/3], the atanh
// series through s^15 (truncation below 2e-9 relative). Relative accuracy for t near 0.
KILN_MATH_FN float log1p_unit(float t) {
  const float s = KILN_FDIV(t, 2.0f + t);
  const float s2 = s * s;
  float p = KILN_FMAF(s2, 1.0f / 15, 1.0f / 13);
  p = KILN_FMAF(p, s2, 1.0f / 11);
  p = KILN_FMAF(p, s2, 1.0f / 9);
  p = KILN_FMAF(p, s2, 1.0f / 7);
  p = KILN_FMAF(p, s2, 1.0f / 5);
  p = KILN_FMAF(p, s2, 1.0f / 3);
  const float two_s = 2.0f * s;
  return KILN_FMAF(two_s * s2, p, two_s);
}

// -log(u) for u = (w + 1) 2^-32 in (0, 1], relative accuracy everywhere, as k ln 2 - log1p(t).
// u > 1/2: u = 1 - y with y = ~w 2^-32 (~w < 2^31), so k = 0 and t = -y keep the small results
// exact to rounding. u <= 1/2: w + 1 = m 2^e with m in [1, 2), so k = 32 - e and t = m - 1: the
// result is at least ln 2 (no cancellation). ln 2 in two parts so that k ln2_hi is exact. Both
// cases are computed and one selected: the branch on a random word would mispredict half the
// time on a CPU.
KILN_MATH_FN float neg_log_unit(unsigned w) {
  const bool upper = w >= 0x80000000u;
  const unsigned bits = KILN_FLOAT_BITS((float)(w + 1u));  // (w = ~0 gives 0: the upper case)
  const float m = KILN_BITS_FLOAT((bits & 0x7fffffu) | 0x3f800000u);
  const float t = upper ? -(float)(~w) * 2.3283064365386963e-10f : m - 1.0f;
  const float k = upper ? 0.0f : (float)(32 - ((int)(bits >> 23) - 127));
  const float tail = KILN_FMAF(k, -1.42860677e-6f, log1p_unit(t));
  return KILN_FMAF(k, 0.693145752f, -tail);
}

// sin and cos of phi in [0, pi/4]: Taylor through phi^9 (sin) and phi^10 (cos).
KILN_MATH_FN void sincos_octant(float phi, float& s, float& c) {
  const float p2 = phi * phi;
  float ps = KILN_FMAF(p2, 2.75573192e-6f, -1.98412698e-4f);
  ps = KILN_FMAF(ps, p2, 8.33333333e-3f);
  ps = KILN_FMAF(ps, p2, -1.66666667e-1f);
  s = KILN_FMAF(phi * p2, ps, phi);
  float pc = KILN_FMAF(p2, -2.75573192e-7f, 2.48015873e-5f);
  pc = KILN_FMAF(pc, p2, -1.38888889e-3f);
  pc = KILN_FMAF(pc, p2, 4.16666667e-2f);
  pc = KILN_FMAF(pc, p2, -0.5f);
  c = KILN_FMAF(pc, p2, 1.0f);
}

// sin and cos of the angle 2 pi w 2^-32. The top three bits pick the octant o, the other 29 the
// angle within it; odd octants reflect (pi/4 minus it, from the integer 2^29 - low, so exact),
// then sin and cos swap and change sign by o.
KILN_MATH_FN void sincos_turn(unsigned w, float& s, float& c) {
  const unsigned o = w >> 29, low = w & 0x1fffffffu;
  const unsigned f = (o & 1u) ? 0x20000000u - low : low;
  const float phi = (float)f * 1.46291808e-9f;  // (pi / 4) 2^-29
  float a, b;
  sincos_octant(phi, a, b);
  const bool swap = ((o + 1u) & 2u) != 0;
  s = swap ? b : a;
  c = swap ? a : b;
  if (o >= 4u) s = -s;
  if (((o + 2u) & 4u) != 0) c = -c;
}

// The two standard normals of the word pair (w0, w1): r cos t and r sin t, r = sqrt(-2 log u1),
// u1 = (w0 + 1) 2^-32, t = 2 pi w1 2^-32.
KILN_MATH_FN void box_muller(unsigned w0, unsigned w1, float& z0, float& z1) {
  const float r = KILN_FSQRT(2.0f * neg_log_unit(w0));
  float s, c;
  sincos_turn(w1, s, c);
  z0 = r * c;
  z1 = r * s;
}

// A normal(mean, std) value from a standard normal: one rounding.
KILN_MATH_FN float normal_value(float z, float mean, float std) { return KILN_FMAF(std, z, mean); }

#if !(defined(__CUDACC_RTC__) || defined(__CUDACC__))
// Element i of normal(mean, std) for `seed` (src/core/philox.hpp's mapping): the reference, one
// element at a time.
inline float normal_at(std::uint64_t seed, std::uint64_t i, float mean, float std) {
  const auto w = philox::block_words(seed, i / 4);
  const int pair = static_cast<int>(i % 4) / 2;
  float z0, z1;
  box_muller(w[2 * pair], w[2 * pair + 1], z0, z1);
  return normal_value(i % 2 == 0 ? z0 : z1, mean, std);
}
#endif

}  // namespace dev
}  // namespace kiln
#endif  // KILN_BOX_MULLER_CUH
