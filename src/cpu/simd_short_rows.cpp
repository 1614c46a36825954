// The SIMD reductions of short rows: sum, mean, max, min, argmax and argmin over the last dim of a
// contiguous f32 [rows, len] for len 2, 4 and 8 (x.sum(-1) of [1e6, 8], say), compiled for every
// target Highway can attain and dispatched at run time (simd_kernels.cpp has the table).
//
// Why: src/cpu/reduce.cpp's short-row loop runs across a block of rows with one running state per
// row, which the compiler vectorizes only with a gather per element (row r's element j is len
// floats from row r + 1's); that bound it at 30-65 % of a copy's rate. Here Highway's interleaved
// loads (and, for 8, one more shuffle) turn a vector's worth of rows into one vector per column,
// and the states advance a column at a time: the same steps, in the same order, on every lane.
//
// Each row's elements are taken in order exactly as the short-row loop's Policy::first and
// Policy::step take them (sums accumulate in double from the first element; max/min keep the
// first of equal values and the first NaN; argmax/argmin stop at the first NaN), so a row's result
// is that loop's bit for bit and fused reductions still equal unfused ones.
//
// Foreach_target re-includes this file once per target, so everything outside HWY_ONCE is
// compiled several times into namespaces N_AVX2, N_SSE4, ...
#if KILN_WITH_SIMD

#include <cstddef>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/simd_short_rows.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/highway.h>

#include "cpu/kernels.hpp"
#include "cpu/simd_common-inl.hpp"
#include "cpu/simd_dispatch.hpp"

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::HWY_NAMESPACE {

#if KILN_SIMD_F64

using kiln::detail::Reduction;

// Columns of the N rows (N lanes) at p, kLen floats each: c[j] lane r is row r's element j.
template <int kLen>
HWY_INLINE void LoadColumns(const float* p, VF* c) {
  const DF df;
  if constexpr (kLen == 2) {
    hn::LoadInterleaved2(df, p, c[0], c[1]);
  } else if constexpr (kLen == 4) {
    hn::LoadInterleaved4(df, p, c[0], c[1], c[2], c[3]);
  } else {
    // Four-way interleaving of rows of 8 gives a[k] lane 2r = row r's element k and lane 2r + 1 =
    // its element k + 4 (for the first N / 2 rows; b for the others): their even and odd lanes
    // are the columns.
    VF a[4], b[4];
    const std::size_t N = hn::Lanes(df);
    hn::LoadInterleaved4(df, p, a[0], a[1], a[2], a[3]);
    hn::LoadInterleaved4(df, p + 4 * N, b[0], b[1], b[2], b[3]);
    for (int k = 0; k < 4; ++k) {
      c[k] = hn::ConcatEven(df, b[k], a[k]);
      c[k + 4] = hn::ConcatOdd(df, b[k], a[k]);
    }
  }
}

// The rows' sums (or means) accumulated in double from the first element, as Sum::first and
// Sum::step do, in two halves of N / 2 lanes; rounded to float once.
template <int kLen>
HWY_INLINE VF SumColumns(const VF* c, bool mean) {
  const DF df;
  const hn::Half<DF> dh;
  const hn::Rebind<double, decltype(dh)> dd;
  auto lo = hn::PromoteTo(dd, hn::LowerHalf(dh, c[0]));
  auto hi = hn::PromoteTo(dd, hn::UpperHalf(dh, c[0]));
  for (int j = 1; j < kLen; ++j) {
    lo = hn::Add(lo, hn::PromoteTo(dd, hn::LowerHalf(dh, c[j])));
    hi = hn::Add(hi, hn::PromoteTo(dd, hn::UpperHalf(dh, c[j])));
  }
  if (mean) {
    lo = hn::Div(lo, hn::Set(dd, kLen));
    hi = hn::Div(hi, hn::Set(dd, kLen));
  }
  return hn::Combine(df, DemoteToF32(dh, hi), DemoteToF32(dh, lo));
}

// Whether v replaces the running extreme e (reduce.cpp's `better`): strictly better, or NaN.
template <bool kMax>
HWY_INLINE hn::Mask<DF> Better(VF v, VF e) {
  return hn::Or(kMax ? hn::Gt(v, e) : hn::Lt(v, e), hn::IsNaN(v));
}

template <int kLen, bool kMax>
HWY_INLINE VF ExtremeColumns(const VF* c) {
  VF e = c[0];
  for (int j = 1; j < kLen; ++j) e = hn::IfThenElse(Better<kMax>(c[j], e), c[j], e);
  return e;
}

// The index of each row's extreme: a step takes element j where the running value is not NaN
// and j is better (Arg::step).
template <int kLen, bool kMax>
HWY_INLINE VI ArgColumns(const VF* c) {
  const DI di;
  VF e = c[0];
  VI at = hn::Zero(di);
  for (int j = 1; j < kLen; ++j) {
    const auto take = hn::AndNot(hn::IsNaN(e), Better<kMax>(c[j], e));
    e = hn::IfThenElse(take, c[j], e);
    at = hn::IfThenElse(hn::RebindMask(di, take), hn::Set(di, j), at);
  }
  return at;
}

template <int kLen>
std::int64_t ShortRowsOf(Reduction op, const float* p, std::int64_t rows, void* out) {
  const DF df;
  const DI di;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  float* of = static_cast<float*>(out);
  i32* oi = static_cast<i32*>(out);
  std::int64_t r = 0;
  VF c[kLen];
  for (; r + N <= rows; r += N) {
    LoadColumns<kLen>(p + r * kLen, c);
    switch (op) {
      case Reduction::sum:
      case Reduction::mean:
        hn::StoreU(SumColumns<kLen>(c, op == Reduction::mean), df, of + r);
        break;
      case Reduction::max:
        hn::StoreU(ExtremeColumns<kLen, true>(c), df, of + r);
        break;
      case Reduction::min:
        hn::StoreU(ExtremeColumns<kLen, false>(c), df, of + r);
        break;
      case Reduction::argmax:
        hn::StoreU(ArgColumns<kLen, true>(c), di, oi + r);
        break;
      case Reduction::argmin:
        hn::StoreU(ArgColumns<kLen, false>(c), di, oi + r);
        break;
    }
  }
  return r;
}

std::int64_t ShortRowsImpl(Reduction op, const float* p, std::int64_t rows, int len, void* out) {
  switch (len) {
    case 2:
      return ShortRowsOf<2>(op, p, rows, out);
    case 4:
      return ShortRowsOf<4>(op, p, rows, out);
    case 8:
      return ShortRowsOf<8>(op, p, rows, out);
    default:
      return 0;
  }
}

#else  // no double lanes on this target: the short-row loop reduces every row

std::int64_t ShortRowsImpl(kiln::detail::Reduction, const float*, std::int64_t, int, void*) {
  return 0;
}

#endif  // KILN_SIMD_F64

}  // namespace kiln::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::cpu {

HWY_EXPORT(ShortRowsImpl);

std::int64_t simd_short_rows(kiln::detail::Reduction op, const float* p, std::int64_t rows, int len,
                             void* out) {
  return HWY_DYNAMIC_DISPATCH(ShortRowsImpl)(op, p, rows, len, out);
}

}  // namespace kiln::cpu
#endif  // HWY_ONCE

#endif  // KILN_WITH_SIMD
