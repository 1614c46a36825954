// The SIMD binary kernels (add, sub, mul, div, pow, minimum, maximum), the comparisons and
// where, compiled for every target Highway can attain and dispatched at run time
// (simd_kernels.cpp has the table). docs/accuracy.md lists the error bounds.
//
// Foreach_target re-includes this file once per target, so everything outside HWY_ONCE is
// compiled several times into namespaces N_AVX2, N_SSE4, ...
#if KILN_WITH_SIMD

#include <algorithm>
#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/simd_binary.cpp"
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
// Binary ops

struct AddOp {
  template <class V>
  HWY_INLINE V operator()(V a, V b) const {
    return hn::Add(a, b);  // i32 wraps
  }
};
struct SubOp {
  template <class V>
  HWY_INLINE V operator()(V a, V b) const {
    return hn::Sub(a, b);
  }
};
struct MulOp {
  template <class V>
  HWY_INLINE V operator()(V a, V b) const {
    return hn::Mul(a, b);
  }
};
struct DivF {
  HWY_INLINE VF operator()(VF a, VF b) const { return hn::Div(a, b); }
};
struct MinI {
  HWY_INLINE VI operator()(VI a, VI b) const { return hn::Min(a, b); }
};
struct MaxI {
  HWY_INLINE VI operator()(VI a, VI b) const { return hn::Max(a, b); }
};

// Highway's Min/Max return one operand when the other is NaN and either zero when both are.
// Equal operands are combined bitwise instead (only +0 and -0 are equal with different bits):
// OR keeps a sign bit, giving -0 for the minimum; AND drops it, giving +0 for the maximum.
struct MinimumF {
  HWY_INLINE VF operator()(VF a, VF b) const {
    const VF m = hn::IfThenElse(hn::Eq(a, b), hn::Or(a, b), hn::Min(a, b));
    return hn::IfThenElse(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), hn::Add(a, b), m);
  }
};
struct MaximumF {
  HWY_INLINE VF operator()(VF a, VF b) const {
    const VF m = hn::IfThenElse(hn::Eq(a, b), hn::And(a, b), hn::Max(a, b));
    return hn::IfThenElse(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), hn::Add(a, b), m);
  }
};

#if KILN_SIMD_F64
// x^y = exp(y log x) in double for finite x > 0 and finite y. The product is clamped to
// [-1000, 700], where Exp is valid and still gives 0 and float overflow where it should.
struct PowF64 {
  template <class DD, class VD>
  HWY_INLINE VD operator()(DD dd, VD x, VD y) const {
    const VD e = hn::Mul(y, hn::Log(dd, x));
    return hn::Exp(dd, hn::Min(hn::Max(e, hn::Set(dd, -1000.0)), hn::Set(dd, 700.0)));
  }
};
#endif

// std::pow semantics. Vectors with x <= 0, a non-finite x or y, or NaN take the scalar path.
struct PowF {
  HWY_INLINE VF operator()(VF x, VF y) const {
#if KILN_SIMD_F64
    const DF d;
    const VF kMax = hn::Set(d, FLT_MAX);
    const auto ok =
        hn::And(hn::And(hn::Gt(x, hn::Zero(d)), hn::Le(x, kMax)), hn::Le(hn::Abs(y), kMax));
    if (HWY_LIKELY(hn::AllTrue(d, ok))) return ViaF64(PowF64{}, x, y);
#endif
    return PerLane2(x, y, math::pow);
  }
};

// Exponents with an exact shortcut, used when the exponent is a splat.
struct SquareF {
  HWY_INLINE VF operator()(VF x) const { return hn::Mul(x, x); }  // pow(x, 2), inf/NaN too
};
struct RecipF {
  HWY_INLINE VF operator()(VF x) const { return hn::Div(hn::Set(DF(), 1.0f), x); }  // pow(x, -1)
};
// pow(x, 0.5) is sqrt(x) except pow(-0, 0.5) = +0 (adding +0 turns -0 into +0 and changes
// nothing else) and pow(-inf, 0.5) = +inf.
struct PowHalfF {
  HWY_INLINE VF operator()(VF x) const {
    const DF d;
    const VF inf = hn::Set(d, std::numeric_limits<float>::infinity());
    const VF r = hn::Add(hn::Sqrt(x), hn::Zero(d));
    return hn::IfThenElse(hn::Eq(x, hn::Neg(inf)), inf, r);
  }
};

void Pow(Lanes a, Lanes b, void* out, std::size_t n) {
  if (b.splat && !a.splat) {
    const float y = *static_cast<const float*>(b.p);
    if (y == 2.0f) return Unary<float, float>(SquareF{}, a, out, n);
    if (y == 1.0f) return Copy(a, out, n);
    if (y == 0.0f) {
      std::fill_n(static_cast<float*>(out), n, 1.0f);  // even for x = NaN
      return;
    }
    if (y == 0.5f) return Unary<float, float>(PowHalfF{}, a, out, n);
    if (y == -1.0f) return Unary<float, float>(RecipF{}, a, out, n);
  }
  Binary<float, float>(PowF{}, a, b, out, n);
}

// Comparisons write int32 0/1. For floats, ne is Not(Eq): Highway's Ne is false for NaN on x86.
struct EqC {
  template <class V>
  HWY_INLINE auto operator()(V a, V b) const {
    return hn::Eq(a, b);
  }
};
struct NeC {
  template <class V>
  HWY_INLINE auto operator()(V a, V b) const {
    return hn::Not(hn::Eq(a, b));
  }
};
struct LtC {
  template <class V>
  HWY_INLINE auto operator()(V a, V b) const {
    return hn::Lt(a, b);
  }
};
struct GtC {
  template <class V>
  HWY_INLINE auto operator()(V a, V b) const {
    return hn::Gt(a, b);
  }
};
// Le/Ge are ordered comparisons for floats (false with NaN) and Not(Gt)/Not(Lt) for integers.
struct LeC {
  HWY_INLINE auto operator()(VF a, VF b) const { return hn::Le(a, b); }
  HWY_INLINE auto operator()(VI a, VI b) const { return hn::Not(hn::Gt(a, b)); }
};
struct GeC {
  HWY_INLINE auto operator()(VF a, VF b) const { return hn::Ge(a, b); }
  HWY_INLINE auto operator()(VI a, VI b) const { return hn::Not(hn::Lt(a, b)); }
};

template <class C>
struct Compare {
  template <class V>
  HWY_INLINE VI operator()(V a, V b) const {
    const DI di;
    return hn::IfThenElseZero(hn::RebindMask(di, C{}(a, b)), hn::Set(di, 1));
  }
};

template <class T>
void CompareAll(ir::Op op, Lanes a, Lanes b, void* out, std::size_t n) {
  using ir::Op;
  switch (op) {
    case Op::eq:
      return Binary<i32, T>(Compare<EqC>{}, a, b, out, n);
    case Op::ne:
      return Binary<i32, T>(Compare<NeC>{}, a, b, out, n);
    case Op::lt:
      return Binary<i32, T>(Compare<LtC>{}, a, b, out, n);
    case Op::le:
      return Binary<i32, T>(Compare<LeC>{}, a, b, out, n);
    case Op::gt:
      return Binary<i32, T>(Compare<GtC>{}, a, b, out, n);
    default:
      return Binary<i32, T>(Compare<GeC>{}, a, b, out, n);
  }
}

// check_binary (called before dispatch) has accepted (op, in).
void BinaryImpl(ir::Op op, DType in, Lanes a, Lanes b, void* out, std::size_t n) {
  using ir::Op;
  if (kernel_is_comparison(op)) {
    if (in == DType::f32) return CompareAll<float>(op, a, b, out, n);
    return CompareAll<i32>(op, a, b, out, n);  // i32, and bool as 0/1
  }
  if (in == DType::i32) {
    switch (op) {
      case Op::add:
        return Binary<i32, i32>(AddOp{}, a, b, out, n);
      case Op::sub:
        return Binary<i32, i32>(SubOp{}, a, b, out, n);
      case Op::mul:
        return Binary<i32, i32>(MulOp{}, a, b, out, n);
      case Op::minimum:
        return Binary<i32, i32>(MinI{}, a, b, out, n);
      default:
        return Binary<i32, i32>(MaxI{}, a, b, out, n);
    }
  }
  switch (op) {
    case Op::add:
      return Binary<float, float>(AddOp{}, a, b, out, n);
    case Op::sub:
      return Binary<float, float>(SubOp{}, a, b, out, n);
    case Op::mul:
      return Binary<float, float>(MulOp{}, a, b, out, n);
    case Op::div:
      return Binary<float, float>(DivF{}, a, b, out, n);
    case Op::pow:
      return Pow(a, b, out, n);
    case Op::minimum:
      return Binary<float, float>(MinimumF{}, a, b, out, n);
    default:
      return Binary<float, float>(MaximumF{}, a, b, out, n);
  }
}

// ------------------------------------------------------------------------------------------
// where: every dtype is 32-bit lanes, so it selects int32 bit patterns.

struct WhereOp {
  HWY_INLINE VI operator()(VI c, VI a, VI b) const {
    return hn::IfThenElse(hn::Eq(c, hn::Zero(DI())), b, a);
  }
};

void WhereImpl(DType /*t*/, Lanes cond, Lanes a, Lanes b, void* out, std::size_t n) {
  const i32* pc = static_cast<const i32*>(cond.p);
  if (cond.splat) return Copy(*pc != 0 ? a : b, out, n);
  i32* o = static_cast<i32*>(out);
  const Stream<i32> c{pc};
  const i32* pa = static_cast<const i32*>(a.p);
  const i32* pb = static_cast<const i32*>(b.p);
  if (a.splat && b.splat) return Map(o, n, WhereOp{}, c, Splat<i32>{*pa}, Splat<i32>{*pb});
  if (a.splat) return Map(o, n, WhereOp{}, c, Splat<i32>{*pa}, Stream<i32>{pb});
  if (b.splat) return Map(o, n, WhereOp{}, c, Stream<i32>{pa}, Splat<i32>{*pb});
  Map(o, n, WhereOp{}, c, Stream<i32>{pa}, Stream<i32>{pb});
}

}  // namespace kiln::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::cpu {

HWY_EXPORT(BinaryImpl);
HWY_EXPORT(WhereImpl);

void simd_binary(ir::Op op, DType in, Lanes a, Lanes b, void* out, std::size_t n) {
  check_binary(op, in);
  if (n == 0) return;
  HWY_DYNAMIC_DISPATCH(BinaryImpl)(op, in, a, b, out, n);
}

void simd_where(DType t, Lanes cond, Lanes a, Lanes b, void* out, std::size_t n) {
  check_where(t);
  if (n == 0) return;
  HWY_DYNAMIC_DISPATCH(WhereImpl)(t, cond, a, b, out, n);
}

}  // namespace kiln::cpu
#endif  // HWY_ONCE

#endif  // KILN_WITH_SIMD
