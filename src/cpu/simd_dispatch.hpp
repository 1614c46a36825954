// The SIMD kernels' entry points, each checking its arguments as kernel_math.hpp does and
// dispatching to the best target this CPU supports: simd_unary.cpp, simd_binary.cpp,
// simd_half.cpp, simd_short_rows.cpp and simd_columns.cpp define them, simd_kernels.cpp puts them
// in the table.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/kernels.hpp"
#include "ir/program.hpp"
#include "kiln/dtype.hpp"

namespace kiln::cpu {

void simd_unary(ir::Op op, DType in, DType out_t, Lanes a, void* out, std::size_t n);
void simd_binary(ir::Op op, DType in, Lanes a, Lanes b, void* out, std::size_t n);
void simd_where(DType t, Lanes cond, Lanes a, Lanes b, void* out, std::size_t n);
void simd_half_to_f32(DType t, const std::uint16_t* in, float* out, std::size_t n);
void simd_f32_to_half(DType t, const float* in, std::uint16_t* out, std::size_t n);
void simd_half_row_sum(DType t, const std::uint16_t* x, const std::uint16_t* const* terms,
                       std::size_t count, std::uint16_t* out, std::size_t n);
std::int64_t simd_short_rows(kiln::detail::Reduction op, const float* p, std::int64_t rows, int len,
                             void* out);
bool simd_column_sums(DType t, const void* p, std::int64_t k, std::int64_t step, std::int64_t cols,
                      bool first, double* acc);

}  // namespace kiln::cpu
