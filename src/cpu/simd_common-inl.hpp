// The per-target groundwork of the SIMD kernels (simd_unary.cpp, simd_binary.cpp): the vector
// types, the operands and the block loop that runs an op's functor over a block, the per-lane
// slow path and double-precision evaluation.
//
// Each op is a small functor from vectors to a vector; Map() runs it over a block, full vectors
// first and then one padded vector for the tail. Where a Highway math routine is accurate only
// on part of the float range, the functor checks the whole vector with one compare and AllTrue
// and, in the rare vector that holds an argument outside that range (or a NaN/inf), computes
// all its lanes with the scalar functions of kernel_math.hpp instead (PerLane below).
//
// Included after hwy/foreach_target.h by each kernel file, once per target: the guard below is
// Highway's per-target toggle (hwy/highway.h explains it), not a plain include guard.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "cpu/kernels.hpp"

#if defined(KILN_CPU_SIMD_COMMON_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef KILN_CPU_SIMD_COMMON_INL_HPP_
#undef KILN_CPU_SIMD_COMMON_INL_HPP_
#else
#define KILN_CPU_SIMD_COMMON_INL_HPP_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using i32 = std::int32_t;
using DF = hn::ScalableTag<float>;
using DI = hn::ScalableTag<i32>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;

// Room for one vector of 32-bit lanes on this target.
constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// Double precision is available on every x86 and AArch64 target; not on Armv7 or HWY_SCALAR,
// where the ops that compute in double use the scalar functions instead.
#undef KILN_SIMD_F64
#if HWY_HAVE_FLOAT64 && HWY_TARGET != HWY_SCALAR
#define KILN_SIMD_F64 1
#else
#define KILN_SIMD_F64 0
#endif

// ------------------------------------------------------------------------------------------
// Operands and the block loop

// An operand of n contiguous lanes.
template <class T>
struct Stream {
  const T* p;
  HWY_INLINE hn::Vec<hn::ScalableTag<T>> Load(std::size_t i) const {
    return hn::LoadU(hn::ScalableTag<T>(), p + i);
  }
  // The last, partial vector: its rem valid lanes, padded with copies of the last one, so that
  // the padding reads no memory past the block and never sends the vector to a slow path.
  HWY_INLINE hn::Vec<hn::ScalableTag<T>> LoadTail(std::size_t i, std::size_t rem) const {
    HWY_ALIGN T buf[kMaxLanes];
    for (std::size_t j = 0; j < kMaxLanes; ++j) buf[j] = p[i + std::min(j, rem - 1)];
    return hn::Load(hn::ScalableTag<T>(), buf);
  }
};

// An operand that is one value repeated.
template <class T>
struct Splat {
  T v;
  HWY_INLINE hn::Vec<hn::ScalableTag<T>> Load(std::size_t) const {
    return hn::Set(hn::ScalableTag<T>(), v);
  }
  HWY_INLINE hn::Vec<hn::ScalableTag<T>> LoadTail(std::size_t, std::size_t) const {
    return hn::Set(hn::ScalableTag<T>(), v);
  }
};

// out[i] = f(src[i]...) for i < n. out may be the same array as a source: each vector is
// loaded before the one store to its own position.
template <class TO, class F, class... S>
HWY_INLINE void Map(TO* out, std::size_t n, const F& f, const S&... src) {
  const hn::ScalableTag<TO> d;
  const std::size_t N = hn::Lanes(d);
  std::size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(src.Load(i)...), d, out + i);
  if (i < n) {
    HWY_ALIGN TO buf[kMaxLanes];
    hn::Store(f(src.LoadTail(i, n - i)...), d, buf);
    std::memcpy(out + i, buf, (n - i) * sizeof(TO));
  }
}

// Every operand is a splat: compute one vector and repeat its (equal) lanes.
template <class TO, class V>
HWY_INLINE void Fill(TO* out, std::size_t n, V v) {
  std::fill_n(out, n, hn::GetLane(v));
}

template <class TO, class TA, class F>
HWY_INLINE void Unary(const F& f, Lanes a, void* out, std::size_t n) {
  TO* o = static_cast<TO*>(out);
  const TA* pa = static_cast<const TA*>(a.p);
  if (a.splat) return Fill(o, n, f(Splat<TA>{*pa}.Load(0)));
  Map(o, n, f, Stream<TA>{pa});
}

template <class TO, class T, class F>
HWY_INLINE void Binary(const F& f, Lanes a, Lanes b, void* out, std::size_t n) {
  TO* o = static_cast<TO*>(out);
  const T* pa = static_cast<const T*>(a.p);
  const T* pb = static_cast<const T*>(b.p);
  if (a.splat && b.splat) return Fill(o, n, f(Splat<T>{*pa}.Load(0), Splat<T>{*pb}.Load(0)));
  if (a.splat) return Map(o, n, f, Splat<T>{*pa}, Stream<T>{pb});
  if (b.splat) return Map(o, n, f, Stream<T>{pa}, Splat<T>{*pb});
  Map(o, n, f, Stream<T>{pa}, Stream<T>{pb});
}

// ------------------------------------------------------------------------------------------
// Slow paths and double precision

// Applies a scalar function to each lane: the path for vectors with out-of-range arguments.
// Not inlined, so that it stays out of the hot loops.
template <class F>
HWY_NOINLINE VF PerLane(VF x, F f) {
  const DF d;
  HWY_ALIGN float bx[kMaxLanes];
  hn::Store(x, d, bx);
  for (std::size_t i = 0; i < hn::Lanes(d); ++i) bx[i] = f(bx[i]);
  return hn::Load(d, bx);
}

template <class F>
HWY_NOINLINE VF PerLane2(VF x, VF y, F f) {
  const DF d;
  HWY_ALIGN float bx[kMaxLanes];
  HWY_ALIGN float by[kMaxLanes];
  hn::Store(x, d, bx);
  hn::Store(y, d, by);
  for (std::size_t i = 0; i < hn::Lanes(d); ++i) bx[i] = f(bx[i], by[i]);
  return hn::Load(d, bx);
}

#if KILN_SIMD_F64
// Rounds double lanes to float as IEEE conversion does: beyond FLT_MAX plus half an ULP, to
// +-inf. Highway's EMU128 DemoteTo saturates at FLT_MAX instead, so that target converts here.
template <class DH, class VD>
HWY_INLINE hn::Vec<DH> DemoteToF32(DH dh, VD v) {
#if HWY_TARGET == HWY_EMU128
  const hn::DFromV<VD> dd;
  constexpr double kOverflow = 3.4028235677973366e38;  // 2^128 - 2^103
  HWY_ALIGN double in[kMaxLanes];
  HWY_ALIGN float out[kMaxLanes];
  hn::Store(v, dd, in);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < hn::Lanes(dd); ++i) {
    const double x = in[i];
    out[i] = std::fabs(x) >= kOverflow ? (x > 0 ? kInf : -kInf) : static_cast<float>(x);
  }
  return hn::Load(dh, out);
#else
  return hn::DemoteTo(dh, v);
#endif
}

// Evaluates f(dd, x...) on the lanes converted to double, in two halves, and rounds the result
// to float once. Ops whose float routines would lose accuracy (tan near its poles, pow through
// exp(y log x), gelu) compute this way: their double error is far below half a float ULP.
template <class F, class... V>
HWY_INLINE VF ViaF64(const F& f, V... x) {
  const DF df;
  const hn::Half<DF> dh;
  const hn::Rebind<double, decltype(dh)> dd;
  const auto lo = f(dd, hn::PromoteTo(dd, hn::LowerHalf(dh, x))...);
  const auto hi = f(dd, hn::PromoteTo(dd, hn::UpperHalf(dh, x))...);
  return hn::Combine(df, DemoteToF32(dh, hi), DemoteToF32(dh, lo));
}
#endif

// out[i] = a[i] for 32-bit lanes (a splat repeated).
inline void Copy(Lanes a, void* out, std::size_t n) {
  if (a.splat) {
    std::fill_n(static_cast<i32*>(out), n, *static_cast<const i32*>(a.p));
  } else {
    std::memmove(out, a.p, n * sizeof(i32));  // out may be a.p itself
  }
}

}  // namespace kiln::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KILN_CPU_SIMD_COMMON_INL_HPP_
