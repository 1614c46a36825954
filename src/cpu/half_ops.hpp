// The CPU backend's reductions and matrix products of the half types (bf16, f16): on f32
// copies, the way the element-wise kernels compute them (load to f32, round on store).
#pragma once

#include "backend/backend.hpp"
#include "cpu/kernels.hpp"

namespace kiln::cpu {

// Backend::reduce for a half-type x: reduces x's values widened to f32 (sums in double, as
// f32's) and rounds the result once into out.
void reduce_half(detail::ReduceOp op, const detail::TensorImpl& x, int dim,
                 const detail::TensorImpl& out, const KernelTable& kernels);

// Backend::matmul for half-type operands: f32 copies of a and c, the BLAS's sgemm (products
// and sums in f32, as PyTorch's CPU bf16 matmul), and out rounded once.
void matmul_half(const detail::TensorImpl& a, const detail::TensorImpl& c,
                 const detail::TensorImpl& out, const KernelTable& kernels);

}  // namespace kiln::cpu
