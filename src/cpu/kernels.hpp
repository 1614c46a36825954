// Block kernels of the CPU backend: one element-wise IR op over n contiguous 32-bit lanes (and
// the reductions of short f32 rows, which need SIMD shuffles the compiler does not find, column
// sums, which the baseline target runs two doubles at a time, and index_add's sum of half-type
// rows, which needs the half conversions).
//
// The CPU evaluator (src/cpu/cpu_evaluator.cpp) runs a Program over blocks of a few thousand
// elements; for each node it calls one of these on the block. Inside a block every value is
// 32-bit: f32 as float, i32 as int32_t, bool as int32_t 0 or 1; the half types are computed as
// f32 and converted on the way in and out by the table's half conversions. Two tables implement the
// same contract: Highway SIMD with dynamic dispatch, and plain scalar loops (KILN_SIMD=OFF
// or KILN_SIMD=0). docs/accuracy.md gives each op's error bound; both tables hold it over
// the whole finite range of the argument.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/program.hpp"
#include "kiln/detail/ops.hpp"
#include "kiln/dtype.hpp"

namespace kiln::cpu {

// An operand: n contiguous lanes at p, or (splat) the single lane at p repeated n times.
struct Lanes {
  const void* p;
  bool splat = false;
};

struct KernelTable {
  // The SIMD target its calls dispatch to now, lower case: "avx2", "avx3", "sse4", "scalar".
  const char* (*target)();
  // out = op(a); `in` is a's dtype, `out_t` the node's (they differ only for cast).
  void (*unary)(ir::Op op, DType in, DType out_t, Lanes a, void* out, std::size_t n);
  // out = op(a, b); `in` is the operands' dtype (the node is bool for comparisons).
  void (*binary)(ir::Op op, DType in, Lanes a, Lanes b, void* out, std::size_t n);
  // out = cond ? a : b; `t` is the dtype of a, b and out.
  void (*where)(DType t, Lanes cond, Lanes a, Lanes b, void* out, std::size_t n);
  // The bits of n elements of half type t (bf16, f16) to f32 lanes (exact), and f32 lanes to
  // them, rounded to nearest even as include/kiln/half.hpp rounds (NaN stays NaN).
  void (*half_to_f32)(DType t, const std::uint16_t* in, float* out, std::size_t n);
  void (*f32_to_half)(DType t, const float* in, std::uint16_t* out, std::size_t n);
  // n elements of half type t: out = x + terms[0] + ... + terms[count - 1], each element summed
  // in f32 in that order and rounded once (index_add's destination rows, in one pass).
  void (*half_row_sum)(DType t, const std::uint16_t* x, const std::uint16_t* const* terms,
                       std::size_t count, std::uint16_t* out, std::size_t n);
  // The reduction op of each of `rows` adjacent f32 rows of len elements at p (the last dim of a
  // contiguous [rows, len]) into out: f32, or i32 indices for argmax/argmin. Each row's elements
  // are taken in order as src/cpu/reduce.cpp's short-row loop takes them, bit for bit. Returns
  // how many leading rows it reduced (0 for a len it has no kernel for); the caller does the rest.
  std::int64_t (*short_rows)(kiln::detail::Reduction op, const float* p, std::int64_t rows, int len,
                             void* out);
  // Column sums: each of k rows of cols elements of type t (f32, bf16, f16), `step` elements
  // apart from p, added in order into the f64 sums acc[0, cols) (with first, acc starts at row 0's
  // values), each value widened exactly: bit for bit as src/cpu/reduce.cpp's column loop adds the
  // f32 values. Returns false (nothing done) where the table has no kernel for it; the caller
  // then sums.
  bool (*column_sums)(DType t, const void* p, std::int64_t k, std::int64_t step, std::int64_t cols,
                      bool first, double* acc);
};

// Highway kernels for the best target this CPU supports, or the best at or under the cap.
const KernelTable& simd_kernels();

// Scalar loops over libm.
const KernelTable& scalar_kernels();

}  // namespace kiln::cpu
