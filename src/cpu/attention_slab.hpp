// The operand rows the CPU attention kernels (attention.cpp, attention_backward.cpp) hand to sgemm:
// a block of rows of one (b, h) slab of a [B, H, T, D] tensor, as f32 rows sgemm can describe.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.hpp"
#include "cpu/blas_library.hpp"
#include "cpu/kernels.hpp"

namespace kiln::cpu {

// An f32 matrix as sgemm reads it: rows at p + r * ld, unit stride within a row.
struct Mat {
  const float* p;
  std::int64_t ld;
};

// Rows [r0, r0 + n) of t's (b, h) slab, D = t.shape[3] wide: in place where sgemm can read them
// (f32, a row stride no smaller than D), else an f32 copy in scratch (n * D floats).
Mat slab_rows(const detail::TensorImpl& t, std::int64_t b, std::int64_t h, std::int64_t r0,
              std::int64_t n, std::vector<float>& scratch, const KernelTable& k);

// The checks both kernels make before calling the BLAS: every extent sgemm sees (Tk, D) fits its
// 32-bit int (ValueError) and a CBLAS is loaded (DeviceError); `op` names the call in the message.
void check_attention_blas(const char* op, const detail::TensorImpl& q, const detail::TensorImpl& k);

}  // namespace kiln::cpu
