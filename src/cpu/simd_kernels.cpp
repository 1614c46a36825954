// The SIMD kernel table: Highway vectors, compiled for every x86/Arm target Highway can attain
// and dispatched at run time to the best one this CPU supports (the targets' names and the cap
// are src/core/simd_targets.hpp's). The kernels themselves: simd_unary.cpp (unary ops and
// casts), simd_binary.cpp (binary ops, comparisons, where), both built on simd_common-inl.hpp,
// simd_half.cpp (the half types' conversions), simd_short_rows.cpp (reductions of short rows)
// and simd_columns.cpp (column sums).
#if KILN_WITH_SIMD

#include "core/simd_targets.hpp"
#include "cpu/kernels.hpp"
#include "cpu/simd_dispatch.hpp"

namespace kiln::cpu {

const KernelTable& simd_kernels() {
  static const KernelTable table{kiln::detail::chosen_simd_target,
                                 simd_unary,
                                 simd_binary,
                                 simd_where,
                                 simd_half_to_f32,
                                 simd_f32_to_half,
                                 simd_half_row_sum,
                                 simd_short_rows,
                                 simd_column_sums};
  return table;
}

}  // namespace kiln::cpu

#endif  // KILN_WITH_SIMD
