// The SIMD unary kernels: neg, abs, relu, the transcendental ops (sin, cos, tan, exp, log,
// sqrt, rsqrt, tanh, sigmoid, gelu) and the casts between f32, i32 and bool, compiled for every
// target Highway can attain and dispatched at run time (simd_kernels.cpp has the table).
// docs/accuracy.md lists the ranges of the fast paths and the error bounds they buy.
//
// Foreach_target re-includes this file once per target, so everything outside HWY_ONCE is
// compiled several times into namespaces N_AVX2, N_SSE4, ...
#if KILN_WITH_SIMD

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/simd_unary.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "cpu/kernel_math.hpp"
#include "cpu/kernels.hpp"
#include "cpu/simd_common-inl.hpp"
#include "cpu/simd_dispatch.hpp"

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::HWY_NAMESPACE {

// ------------------------------------------------------------------------------------------
// Unary ops

struct NegOp {
  template <class V>
  HWY_INLINE V operator()(V x) const {
    return hn::Neg(x);  // f32: flips the sign bit; i32: 0 - x, wrapping
  }
};

struct AbsOp {
  template <class V>
  HWY_INLINE V operator()(V x) const {
    return hn::Abs(x);  // f32: clears the sign bit; i32: abs(INT_MIN) == INT_MIN
  }
};

struct ReluF {
  // x <= 0 is false for NaN, which therefore passes through; -0 becomes +0.
  HWY_INLINE VF operator()(VF x) const { return hn::IfThenZeroElse(hn::Le(x, hn::Zero(DF())), x); }
};

struct ReluI {
  HWY_INLINE VI operator()(VI x) const { return hn::Max(x, hn::Zero(DI())); }
};

// Below kTrigMax, sin and cos are computed in SIMD; a vector with a lane beyond it (or an inf
// or NaN) computes all its lanes with std::sin/std::cos. On targets with fused multiply-add the
// reduction below is exact enough there (and checked over every float); on the others Highway's
// Sin/Cos, whose four-part reduction is valid up to about 39000 (math-inl.h).
constexpr float kTrigMax = 39000.0f;

// Below this magnitude sin(x) and tan(x) round to x itself. Returning x there also keeps the
// sign of -0, which the polynomial would lose.
constexpr float kTrigTiny = 0x1p-12f;

#if HWY_NATIVE_FMA
// sin and cos through one reduction by pi and one odd polynomial.
//
// The reduction: n = round(x / pi) and r = x - n pi, so |r| <= pi/2 and sin(x) = (-1)^n sin(r).
// Adding kRound to x / pi (in the same FMA) rounds it to an integer and leaves n's parity in the
// low mantissa bit, so no float-int conversion is needed. pi is split into three floats
// kPi1 + kPi2 + kPi3 (each the float nearest the rest; 2e-23 remains). With FMA the first step
// x - n kPi1 is exact: for n != 0, |x| >= pi/2, so x and n kPi1 are multiples of 2^-23 and their
// difference, below 2 in magnitude, fits in 24 bits. The next two steps round once each. For
// |x| <= kTrigMax, n <= 12415, so the neglected n * 2e-23 is far below an ULP of the smallest
// |r| a float there reaches (8.4e-9, at 505.796417).
//
// The polynomial: sin(r) = r + r^3 P(r^2), P of degree 3 fitted for kiln (Remez on the relative
// error of sin, float coefficients refitted one by one, with mpmath) on |r| <= pi/2 + 0.004: the
// rounding of x / pi (1/pi as a float is 1.3e-8 off) and of cos's x / pi + 1/2 can push |r| past
// pi/2 by up to 3.2e-3 at kTrigMax. Its relative error is 6.4e-9, a tenth of an ULP.
constexpr float kInvPi = 0x1.45f306p-2f;
constexpr float kRound = 0x1.8p23f;  // 1.5 * 2^23: v + kRound is an integer for |v| < 2^22
constexpr float kPi1 = 0x1.921fb6p1f;
constexpr float kPi2 = -0x1.777a5cp-24f;
constexpr float kPi3 = -0x1.ee59dap-49f;

// r - n pi for an integral float n.
HWY_INLINE VF ReduceByPi(VF r, VF n) {
  const DF d;
  r = hn::NegMulAdd(n, hn::Set(d, kPi1), r);
  r = hn::NegMulAdd(n, hn::Set(d, kPi2), r);
  return hn::NegMulAdd(n, hn::Set(d, kPi3), r);
}

// sin(r) for |r| <= pi/2 + 0.004, negated where the low mantissa bit of t (n's parity) is set.
// Estrin's scheme: a shorter dependency chain than Horner's, so more vectors are in flight.
HWY_INLINE VF SinPolySigned(VF r, VF t) {
  const DF d;
  const VF s = hn::Mul(r, r);
  const VF s2 = hn::Mul(s, s);
  const VF lo = hn::MulAdd(hn::Set(d, 0x1.110ed8p-7f), s, hn::Set(d, -0x1.55554cp-3f));
  const VF hi = hn::MulAdd(hn::Set(d, 0x1.5dbcdcp-19f), s, hn::Set(d, -0x1.9f704cp-13f));
  const VF p = hn::MulAdd(hi, s2, lo);
  const VF odd = hn::BitCast(d, hn::ShiftLeft<31>(hn::BitCast(DI(), t)));
  return hn::Xor(hn::MulAdd(hn::Mul(r, s), p, r), odd);
}

// sin(x) for |x| <= kTrigMax.
HWY_INLINE VF SinFast(VF x) {
  const DF d;
  const VF t = hn::MulAdd(x, hn::Set(d, kInvPi), hn::Set(d, kRound));
  const VF n = hn::Sub(t, hn::Set(d, kRound));
  return SinPolySigned(ReduceByPi(x, n), t);
}

// cos(x) = (-1)^n sin(x - (n - 1/2) pi) for n = round(x / pi + 1/2), x = |x| <= kTrigMax.
// (n - 1/2) kPi1 is a multiple of 2^-23, so the first step is exact for x >= 1. Below, it rounds
// (by up to 2^-24 pi/2), but there r is near -pi/2 and the result sees that error scaled by
// cos(r) = sin(x) < 0.85, within the bound of docs/accuracy.md.
HWY_INLINE VF CosFast(VF ax) {
  const DF d;
  const VF y = hn::MulAdd(ax, hn::Set(d, kInvPi), hn::Set(d, 0.5f));
  const VF t = hn::Add(y, hn::Set(d, kRound));
  const VF h = hn::Sub(hn::Sub(t, hn::Set(d, kRound)), hn::Set(d, 0.5f));
  return SinPolySigned(ReduceByPi(ax, h), t);
}
#else
HWY_INLINE VF SinFast(VF x) { return hn::Sin(DF(), x); }
HWY_INLINE VF CosFast(VF ax) { return hn::Cos(DF(), ax); }
#endif

struct SinF {
  HWY_INLINE VF operator()(VF x) const {
    const DF d;
    const VF ax = hn::Abs(x);
    if (HWY_LIKELY(hn::AllTrue(d, hn::Le(ax, hn::Set(d, kTrigMax))))) {
      return hn::IfThenElse(hn::Lt(ax, hn::Set(d, kTrigTiny)), x, SinFast(x));
    }
    return PerLane(x, math::sin);
  }
};

struct CosF {
  HWY_INLINE VF operator()(VF x) const {
    const DF d;
    const VF ax = hn::Abs(x);
    if (HWY_LIKELY(hn::AllTrue(d, hn::Le(ax, hn::Set(d, kTrigMax))))) return CosFast(ax);
    return PerLane(x, math::cos);
  }
};

#if KILN_SIMD_F64
// Highway has no Tan; sin/cos in double keep their relative accuracy even next to the poles,
// where a float cos would have few correct bits.
struct TanF64 {
  template <class DD, class VD>
  HWY_INLINE VD operator()(DD dd, VD x) const {
    return hn::Div(hn::Sin(dd, x), hn::Cos(dd, x));
  }
};
#endif

struct TanF {
  HWY_INLINE VF operator()(VF x) const {
#if KILN_SIMD_F64
    const DF d;
    const VF ax = hn::Abs(x);
    if (HWY_LIKELY(hn::AllTrue(d, hn::Le(ax, hn::Set(d, kTrigMax))))) {
      return hn::IfThenElse(hn::Lt(ax, hn::Set(d, kTrigTiny)), x, ViaF64(TanF64{}, x));
    }
#endif
    return PerLane(x, math::tan);
  }
};

// Highway's Exp returns 0 below -104 (where exp(x) rounds to 0 anyway, -inf included) and is
// accurate above, subnormal results included; overflow (x > 88.72) and NaN take the scalar path.
constexpr float kExpFastMax = 88.0f;

struct ExpF {
  HWY_INLINE VF operator()(VF x) const {
    const DF d;
    if (HWY_LIKELY(hn::AllTrue(d, hn::Le(x, hn::Set(d, kExpFastMax))))) return hn::Exp(d, x);
    return PerLane(x, math::exp);
  }
};

// Highway's Log is valid on (0, FLT_MAX]; 0, negatives, inf and NaN take the scalar path.
struct LogF {
  HWY_INLINE VF operator()(VF x) const {
    const DF d;
    const auto ok = hn::And(hn::Gt(x, hn::Zero(d)), hn::Le(x, hn::Set(d, FLT_MAX)));
    if (HWY_LIKELY(hn::AllTrue(d, ok))) return hn::Log(d, x);
    return PerLane(x, math::log);
  }
};

struct SqrtF {
  HWY_INLINE VF operator()(VF x) const { return hn::Sqrt(x); }
};

// Correctly rounded sqrt, then a correctly rounded division: at most one ULP off the exact
// reciprocal square root (Highway's ApproximateReciprocalSqrt has only about 12 bits).
struct RsqrtF {
  HWY_INLINE VF operator()(VF x) const { return hn::Div(hn::Set(DF(), 1.0f), hn::Sqrt(x)); }
};

// Highway's Tanh is valid everywhere (tanh(+-inf) = +-1) except for NaN, which is replaced by
// 0 on the way in (its integer conversion is undefined for NaN on some targets) and put back.
struct TanhF {
  HWY_INLINE VF operator()(VF x) const {
    const DF d;
    const auto nan = hn::IsNaN(x);
    return hn::IfThenElse(nan, x, hn::Tanh(d, hn::IfThenZeroElse(nan, x)));
  }
};

// sigmoid(x) = 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0, with e = exp(-|x|) in (0, 1],
// so nothing overflows and for x < 0 the result keeps its relative accuracy (it is about
// exp(x)). Above |x| = 87, e would be subnormal; those vectors and NaN take the scalar path.
constexpr float kSigmoidFastMax = 87.0f;

struct SigmoidF {
  HWY_INLINE VF operator()(VF x) const {
    const DF d;
    const VF ax = hn::Abs(x);
    if (HWY_LIKELY(hn::AllTrue(d, hn::Le(ax, hn::Set(d, kSigmoidFastMax))))) {
      const VF e = hn::Exp(d, hn::Neg(ax));
      const VF r = hn::Div(hn::Set(d, 1.0f), hn::Add(hn::Set(d, 1.0f), e));
      return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Mul(e, r), r);
    }
    return PerLane(x, math::sigmoid);
  }
};

#if KILN_SIMD_F64
// gelu(x) = x * Phi(x). With a = |x| and the upper tail Q(a) = 0.5 * erfc(a / sqrt(2)),
// Phi(x) = Q(a) for x < 0 and 1 - Q(a) for x >= 0 (no cancellation: Q <= 0.5). Q is computed
// as exp(-a^2/2) * t * P(s) with t = 5 / (5 + a) and s = (8 t - 5) / 3, which maps a in [0, 15]
// onto s in [-1, 1]; P is a degree-11 Chebyshev fit of Q(a) exp(a^2/2) / t in s, made for kiln
// with mpmath, relative error below 1e-10 on [0, 15]. In double, a^2 is exact and exp is within
// a double ULP, so Q keeps that relative accuracy, and gelu rounds to float once. Above a = 15,
// Q < 4e-51 is taken as 0.
struct GeluF64 {
  // c0 + c1 s
  template <class VD>
  static HWY_INLINE VD Pair(VD s, double c0, double c1) {
    const hn::DFromV<VD> dd;
    return hn::MulAdd(hn::Set(dd, c1), s, hn::Set(dd, c0));
  }

  template <class DD, class VD>
  HWY_INLINE VD operator()(DD dd, VD x) const {
    const VD a = hn::Abs(x);
    const VD amax = hn::Set(dd, 15.0);
    // Lanes beyond 15 (inf and NaN included) are zeroed below; 15 keeps exp and P in range.
    const VD ac = hn::IfThenElse(hn::Le(a, amax), a, amax);
    const VD t = hn::Div(hn::Set(dd, 5.0), hn::Add(hn::Set(dd, 5.0), ac));
    const VD s = hn::MulAdd(t, hn::Set(dd, 8.0 / 3.0), hn::Set(dd, -5.0 / 3.0));
    // Estrin's scheme: pairs, then quadruples, in a shorter dependency chain than Horner's.
    const VD s2 = hn::Mul(s, s);
    const VD s4 = hn::Mul(s2, s2);
    const VD q0 = hn::MulAdd(Pair(s, 0.09049624466591442, 0.04460106901328225), s2,
                             Pair(s, 0.19442231738779672, 0.1475419529655275));
    const VD q1 = hn::MulAdd(Pair(s, 0.0008506331910714522, 3.549361487960056e-06), s2,
                             Pair(s, 0.017229215721374112, 0.004901087514712088));
    const VD q2 = hn::MulAdd(Pair(s, 1.2224670950019642e-06, 4.6812988634653924e-07), s2,
                             Pair(s, -4.0655416682811434e-05, -7.104968413408582e-06));
    const VD p = hn::MulAdd(hn::MulAdd(q2, s4, q1), s4, q0);
    const VD g = hn::Exp(dd, hn::Mul(hn::Mul(ac, ac), hn::Set(dd, -0.5)));
    const VD q = hn::IfThenZeroElse(hn::Gt(a, amax), hn::Mul(hn::Mul(g, t), p));
    const VD phi = hn::IfThenElse(hn::Lt(x, hn::Zero(dd)), q, hn::Sub(hn::Set(dd, 1.0), q));
    return hn::Mul(x, phi);
  }
};
#endif

struct SiluF {
  HWY_INLINE VF operator()(VF x) const { return PerLane(x, math::silu); }
};

struct ErfF {
  HWY_INLINE VF operator()(VF x) const { return PerLane(x, math::erf); }
};

struct GeluF {
  HWY_INLINE VF operator()(VF x) const {
#if KILN_SIMD_F64
    const DF d;
    // Below -15 the result is -0; setting it here also gives the limit -0 at -inf.
    return hn::IfThenElse(hn::Lt(x, hn::Set(d, math::kGeluZeroBelow)), hn::Set(d, -0.0f),
                          ViaF64(GeluF64{}, x));
#else
    return PerLane(x, math::gelu);
#endif
  }
};

// ------------------------------------------------------------------------------------------
// Casts

// Truncates toward zero; saturates at the int32 limits; NaN becomes 0. The argument is made
// finite and clamped before the conversion, which is undefined outside int32 on some targets.
struct F32ToI32 {
  HWY_INLINE VI operator()(VF x) const {
    const DF df;
    const DI di;
    const VF x0 = hn::IfThenZeroElse(hn::IsNaN(x), x);
    const VF lo = hn::Set(df, -2147483648.0f);
    const VF hi = hn::Set(df, 2147483520.0f);  // the largest float below 2^31
    const VI r = hn::ConvertTo(di, hn::Min(hn::Max(x0, lo), hi));
    const auto big = hn::RebindMask(di, hn::Ge(x0, hn::Set(df, 2147483648.0f)));
    return hn::IfThenElse(big, hn::Set(di, std::numeric_limits<i32>::max()), r);
  }
};

struct I32ToF32 {
  HWY_INLINE VF operator()(VI x) const { return hn::ConvertTo(DF(), x); }
};

// x != 0 as 0/1. Not(Eq) rather than Highway's Ne, which is false for NaN on x86 (NEQ_OQ).
struct F32ToBool {
  HWY_INLINE VI operator()(VF x) const {
    const DI di;
    const auto nonzero = hn::Not(hn::RebindMask(di, hn::Eq(x, hn::Zero(DF()))));
    return hn::IfThenElseZero(nonzero, hn::Set(di, 1));
  }
};

struct I32ToBool {
  HWY_INLINE VI operator()(VI x) const {
    const DI di;
    return hn::IfThenZeroElse(hn::Eq(x, hn::Zero(di)), hn::Set(di, 1));
  }
};

struct BoolToF32 {
  HWY_INLINE VF operator()(VI x) const {
    const DF df;
    return hn::IfThenZeroElse(hn::RebindMask(df, hn::Eq(x, hn::Zero(DI()))), hn::Set(df, 1.0f));
  }
};

void Cast(DType in, DType out_t, Lanes a, void* out, std::size_t n) {
  // Bool lanes are already the int32 values 0 and 1.
  if (in == out_t || (in == DType::boolean && out_t == DType::i32)) return Copy(a, out, n);
  switch (in) {
    case DType::f32:
      if (out_t == DType::i32) return Unary<i32, float>(F32ToI32{}, a, out, n);
      return Unary<i32, float>(F32ToBool{}, a, out, n);
    case DType::i32:
      if (out_t == DType::f32) return Unary<float, i32>(I32ToF32{}, a, out, n);
      return Unary<i32, i32>(I32ToBool{}, a, out, n);
    case DType::boolean:
      return Unary<float, i32>(BoolToF32{}, a, out, n);
    case DType::bf16:
    case DType::f16:
      return;  // computed as f32: check_unary refused them
  }
}

// check_unary (called before dispatch) has accepted (op, in, out_t).
void UnaryImpl(ir::Op op, DType in, DType out_t, Lanes a, void* out, std::size_t n) {
  using ir::Op;
  if (op == Op::cast) return Cast(in, out_t, a, out, n);
  if (in == DType::i32) {
    switch (op) {
      case Op::neg:
        return Unary<i32, i32>(NegOp{}, a, out, n);
      case Op::abs:
        return Unary<i32, i32>(AbsOp{}, a, out, n);
      default:
        return Unary<i32, i32>(ReluI{}, a, out, n);
    }
  }
  switch (op) {
    case Op::neg:
      return Unary<float, float>(NegOp{}, a, out, n);
    case Op::abs:
      return Unary<float, float>(AbsOp{}, a, out, n);
    case Op::relu:
      return Unary<float, float>(ReluF{}, a, out, n);
    case Op::sin:
      return Unary<float, float>(SinF{}, a, out, n);
    case Op::cos:
      return Unary<float, float>(CosF{}, a, out, n);
    case Op::tan:
      return Unary<float, float>(TanF{}, a, out, n);
    case Op::exp:
      return Unary<float, float>(ExpF{}, a, out, n);
    case Op::log:
      return Unary<float, float>(LogF{}, a, out, n);
    case Op::sqrt:
      return Unary<float, float>(SqrtF{}, a, out, n);
    case Op::rsqrt:
      return Unary<float, float>(RsqrtF{}, a, out, n);
    case Op::tanh:
      return Unary<float, float>(TanhF{}, a, out, n);
    case Op::sigmoid:
      return Unary<float, float>(SigmoidF{}, a, out, n);
    case Op::gelu:
      return Unary<float, float>(GeluF{}, a, out, n);
    case Op::silu:  // (per lane: both in double, as sigmoid's scalar form)
      return Unary<float, float>(SiluF{}, a, out, n);
    case Op::erf:
      return Unary<float, float>(ErfF{}, a, out, n);
      KILN_IR_NOT_UNARY_CASES
      break;
  }
  throw InternalError(std::string("unary kernel: ") + ir::op_name(op) + " is not a unary op");
}

}  // namespace kiln::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::cpu {

HWY_EXPORT(UnaryImpl);

void simd_unary(ir::Op op, DType in, DType out_t, Lanes a, void* out, std::size_t n) {
  check_unary(op, in, out_t);
  if (n == 0) return;  // a and out may then be null
  HWY_DYNAMIC_DISPATCH(UnaryImpl)(op, in, out_t, a, out, n);
}

}  // namespace kiln::cpu
#endif  // HWY_ONCE

#endif  // KILN_WITH_SIMD
