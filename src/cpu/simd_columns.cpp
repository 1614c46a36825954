// The SIMD column sums: rows of f32, bf16 or f16 added into f64 sums per column (x.sum(0) of a
// [rows, cols] matrix, a bias gradient's shape), compiled for every target Highway can attain and
// dispatched at run time (simd_kernels.cpp has the table).
//
// Why: src/cpu/reduce.cpp's column loop, compiled for the baseline target, widens and adds two
// doubles an instruction; on a wide target the loop bound the sum of a half-type [16384, 768],
// whose bytes are half an f32's, at a quarter of a copy's rate. Each column's sum is the same
// chain of double additions in the same order as that loop's (the first row's value, then each
// row's added), so the results are its bit for bit.
//
// Foreach_target re-includes this file once per target, so everything outside HWY_ONCE is
// compiled several times into namespaces N_AVX2, N_SSE4, ...
#if KILN_WITH_SIMD

#include <cstddef>
#include <cstdint>
#include <type_traits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/simd_columns.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/highway.h>

#include "cpu/kernels.hpp"
#include "cpu/simd_common-inl.hpp"
#include "cpu/simd_dispatch.hpp"
#include "cpu/simd_half-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::HWY_NAMESPACE {

#if KILN_SIMD_F64

// The f32 values of a vector's elements from i (element i alone) of a row of E: f32, or the bits
// of bf16 (kBf16) or f16.
template <class E, bool kBf16>
HWY_INLINE hn::Vec<DF> LoadF32(const E* row, std::int64_t i) {
  if constexpr (std::is_same_v<E, float>) {
    return hn::LoadU(DF(), row + i);
  } else {
    return LoadHalf<kBf16>(row + i);
  }
}

template <class E, bool kBf16>
HWY_INLINE double ElementF64(const E* row, std::int64_t i) {
  if constexpr (std::is_same_v<E, float>) {
    return static_cast<double>(row[i]);
  } else {
    return static_cast<double>(HalfToF32<kBf16>(row[i]));
  }
}

// One row's cols values added to acc (with set, written to it). The kernel adds a row at a time
// in address order, which the hardware prefetcher follows: summing strips of columns over
// several rows in registers (fewer stores) read that many streams at once, and over f32 memory
// ran at 0.6 of a copy's rate against 1.1 (a 2-core EPYC, [16384, 768]).
template <class E, bool kBf16>
HWY_INLINE void AddRow(const E* row, std::int64_t cols, bool set, double* acc) {
  const DF df;
  const hn::Half<DF> dh;
  const hn::Rebind<double, decltype(dh)> dd;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t H = static_cast<std::int64_t>(hn::Lanes(dd));
  std::int64_t j = 0;
  for (; j + N <= cols; j += N) {
    const auto v = LoadF32<E, kBf16>(row, j);
    auto lo = hn::PromoteTo(dd, hn::LowerHalf(dh, v));
    auto hi = hn::PromoteTo(dd, hn::UpperHalf(dh, v));
    if (!set) {
      lo = hn::Add(hn::LoadU(dd, acc + j), lo);
      hi = hn::Add(hn::LoadU(dd, acc + j + H), hi);
    }
    hn::StoreU(lo, dd, acc + j);
    hn::StoreU(hi, dd, acc + j + H);
  }
  for (; j < cols; ++j) {
    const double v = ElementF64<E, kBf16>(row, j);
    acc[j] = set ? v : acc[j] + v;
  }
}

template <class E, bool kBf16>
void SumRows(const void* p, std::int64_t k, std::int64_t step, std::int64_t cols, bool first,
             double* acc) {
  const E* rows = static_cast<const E*>(p);
  for (std::int64_t r = 0; r < k; ++r)
    AddRow<E, kBf16>(rows + r * step, cols, first && r == 0, acc);
}

bool ColumnSumsImpl(DType t, const void* p, std::int64_t k, std::int64_t step, std::int64_t cols,
                    bool first, double* acc) {
  switch (t) {
    case DType::f32:
      SumRows<float, false>(p, k, step, cols, first, acc);
      return true;
    case DType::bf16:
      SumRows<std::uint16_t, true>(p, k, step, cols, first, acc);
      return true;
    case DType::f16:
      SumRows<std::uint16_t, false>(p, k, step, cols, first, acc);
      return true;
    default:
      return false;
  }
}

#else

bool ColumnSumsImpl(DType, const void*, std::int64_t, std::int64_t, std::int64_t, bool, double*) {
  return false;  // reduce.cpp's loop sums every column
}

#endif  // KILN_SIMD_F64

}  // namespace kiln::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::cpu {

HWY_EXPORT(ColumnSumsImpl);

bool simd_column_sums(DType t, const void* p, std::int64_t k, std::int64_t step, std::int64_t cols,
                      bool first, double* acc) {
  return HWY_DYNAMIC_DISPATCH(ColumnSumsImpl)(t, p, k, step, cols, first, acc);
}

}  // namespace kiln::cpu
#endif  // HWY_ONCE

#endif  // KILN_WITH_SIMD
