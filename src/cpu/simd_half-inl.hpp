// The per-target conversions between the half types (bf16, f16) and f32 lanes, vector and
// element (simd_half.cpp's conversions and half-row sums, simd_columns.cpp's column sums).
//
// Written in integer operations rather than with Highway's DemoteTo: the Highway Debian 12
// ships truncates f32 to bf16, and its f16 emulation (targets without F16C) truncates too;
// kiln rounds to nearest even on every target, bit for bit as include/kiln/half.hpp does.
//
// Included after hwy/foreach_target.h by each kernel file, once per target: the guard below is
// Highway's per-target toggle (hwy/highway.h explains it), not a plain include guard.
#include <cstdint>

#include "kiln/half.hpp"

#if defined(KILN_CPU_SIMD_HALF_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef KILN_CPU_SIMD_HALF_INL_HPP_
#undef KILN_CPU_SIMD_HALF_INL_HPP_
#else
#define KILN_CPU_SIMD_HALF_INL_HPP_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using DH = hn::Rebind<std::uint16_t, DF>;  // one u16 per f32 lane
using VU = hn::Vec<DU>;

// The f32 bits of a vector of half bits, widened to 32-bit lanes.
HWY_INLINE VU Bf16ToF32Bits(VU h) { return hn::ShiftLeft<16>(h); }

HWY_INLINE VU F16ToF32Bits(VU h) {
  const DU du;
  const DF df;
  const VU sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
  const VU exp = hn::And(hn::ShiftRight<10>(h), hn::Set(du, 0x1fu));
  const VU mant = hn::And(h, hn::Set(du, 0x3ffu));
  const VU normal =
      hn::Or(hn::ShiftLeft<23>(hn::Add(exp, hn::Set(du, 112u))), hn::ShiftLeft<13>(mant));
  const VU special = hn::Or(hn::Set(du, 0x7f800000u), hn::ShiftLeft<13>(mant));  // Inf, NaN
  // A subnormal (or zero) is mant * 2^-24, exact in f32.
  const VU sub =
      hn::BitCast(du, hn::Mul(hn::ConvertTo(df, hn::BitCast(DI(), mant)), hn::Set(df, 0x1p-24f)));
  VU mag = hn::IfThenElse(hn::Eq(exp, hn::Set(du, 0x1fu)), special, normal);
  mag = hn::IfThenElse(hn::Eq(exp, hn::Zero(du)), sub, mag);
  return hn::Or(sign, mag);
}

// f32 bits to half bits (in 32-bit lanes), rounded to nearest even; NaN stays NaN.
HWY_INLINE VU F32BitsToBf16(VU u) {
  const DU du;
  const VU nan = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x40u));
  const VU lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const VU rounded = hn::ShiftRight<16>(hn::Add(hn::Add(u, hn::Set(du, 0x7fffu)), lsb));
  const auto is_nan =
      hn::Gt(hn::BitCast(DI(), hn::And(u, hn::Set(du, 0x7fffffffu))), hn::Set(DI(), 0x7f800000));
  return hn::IfThenElse(hn::RebindMask(du, is_nan), nan, rounded);
}

HWY_INLINE VU F32BitsToF16(VU u) {
  const DU du;
  const DI di;
  const DF df;
  const VU sign = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 0x8000u));
  const VU a = hn::And(u, hn::Set(du, 0x7fffffffu));
  const auto ai = hn::BitCast(di, a);  // non-negative: signed compares are unsigned ones
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to even (a carry
  // into the exponent is the right result).
  const VU rebased = hn::Sub(a, hn::Set(du, 112u << 23));
  const VU normal =
      hn::ShiftRight<13>(hn::Add(hn::Add(rebased, hn::Set(du, 0xfffu)),
                                 hn::And(hn::ShiftRight<13>(rebased), hn::Set(du, 1u))));
  // Below 2^-14: adding 0.5 rounds |x| to a multiple of 2^-24 (0.5's ULP) by the FPU's own
  // round-to-nearest-even; the bits above 0.5's are the subnormal (or 0x400, the smallest
  // normal, when it rounds up to it).
  const VU sub = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, a), hn::Set(df, 0.5f))),
                         hn::Set(du, 0x3f000000u));
  const VU nan = hn::Or(hn::Set(du, 0x7e00u), hn::And(hn::ShiftRight<13>(a), hn::Set(du, 0x3ffu)));
  VU r = hn::IfThenElse(hn::RebindMask(du, hn::Lt(ai, hn::Set(di, 0x38800000))), sub, normal);
  r = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x477ff000 - 1))),
                     hn::Set(du, 0x7c00u), r);
  r = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x7f800000))), nan, r);
  return hn::Or(sign, r);
}

// A vector of half bits at p widened to f32 lanes, and f32 lanes rounded to half bits at p; and
// the same for one element (the loops' tails).
template <bool kBf16>
HWY_INLINE hn::Vec<DF> LoadHalf(const std::uint16_t* p) {
  const VU h = hn::PromoteTo(DU(), hn::LoadU(DH(), p));
  return hn::BitCast(DF(), kBf16 ? Bf16ToF32Bits(h) : F16ToF32Bits(h));
}

template <bool kBf16>
HWY_INLINE void StoreHalf(hn::Vec<DF> v, std::uint16_t* p) {
  const VU u = hn::BitCast(DU(), v);
  const VU h = kBf16 ? F32BitsToBf16(u) : F32BitsToF16(u);
  hn::StoreU(hn::DemoteTo(DH(), hn::BitCast(DI(), h)), DH(), p);  // h < 2^16: exact
}

template <bool kBf16>
float HalfToF32(std::uint16_t h) {
  return kBf16 ? kiln::detail::bf16_bits_to_float(h) : kiln::detail::f16_bits_to_float(h);
}

template <bool kBf16>
std::uint16_t F32ToHalf(float f) {
  return kBf16 ? kiln::detail::float_to_bf16_bits(f) : kiln::detail::float_to_f16_bits(f);
}

}  // namespace kiln::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KILN_CPU_SIMD_HALF_INL_HPP_
