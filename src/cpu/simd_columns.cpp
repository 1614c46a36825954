// The SIMD column sums: f32 rows added into f64 sums per column (x.sum(0) of a [rows, cols]
// matrix, a bias gradient's shape), compiled for every target Highway can attain and dispatched at
// run time (simd_kernels.cpp has the table).
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

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/simd_columns.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/highway.h>

#include "cpu/kernels.hpp"
#include "cpu/simd_common-inl.hpp"
#include "cpu/simd_dispatch.hpp"

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::HWY_NAMESPACE {

#if KILN_SIMD_F64

using DD = hn::ScalableTag<double>;
using DF64 = hn::Rebind<float, DD>;  // one f32 per f64 lane

// One row's cols values added to acc (with set, written to it). The kernel adds a row at a time
// in address order, which the hardware prefetcher follows: summing strips of columns over
// several rows in registers (fewer stores) read that many streams at once, and over f32 memory
// ran at 0.6 of a copy's rate against 1.1 (a 2-core EPYC, [16384, 768]).
HWY_INLINE void AddRow(const float* row, std::int64_t cols, bool set, double* acc) {
  const DD dd;
  const DF64 df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(dd));
  std::int64_t j = 0;
  for (; j + N <= cols; j += N) {
    const auto v = hn::PromoteTo(dd, hn::LoadU(df, row + j));
    hn::StoreU(set ? v : hn::Add(hn::LoadU(dd, acc + j), v), dd, acc + j);
  }
  for (; j < cols; ++j) acc[j] = set ? static_cast<double>(row[j]) : acc[j] + row[j];
}

bool ColumnSumsImpl(const float* p, std::int64_t k, std::int64_t step, std::int64_t cols,
                    bool first, double* acc) {
  for (std::int64_t r = 0; r < k; ++r) AddRow(p + r * step, cols, first && r == 0, acc);
  return true;
}

#else

bool ColumnSumsImpl(const float*, std::int64_t, std::int64_t, std::int64_t, bool, double*) {
  return false;  // reduce.cpp's loop sums every column
}

#endif  // KILN_SIMD_F64

}  // namespace kiln::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::cpu {

HWY_EXPORT(ColumnSumsImpl);

bool simd_column_sums(const float* p, std::int64_t k, std::int64_t step, std::int64_t cols,
                      bool first, double* acc) {
  return HWY_DYNAMIC_DISPATCH(ColumnSumsImpl)(p, k, step, cols, first, acc);
}

}  // namespace kiln::cpu
#endif  // HWY_ONCE

#endif  // KILN_WITH_SIMD
