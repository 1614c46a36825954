// The CPU backend's non-element-wise ops (see src/backend/backend.hpp for the contracts).
#pragma once

#include <cstdint>

#include "backend/backend.hpp"
#include "cpu/kernels.hpp"

namespace kiln::cpu {

// Backend::reduce, with the kernels whose short_rows reduces short f32 rows.
void reduce(detail::ReduceOp op, const detail::TensorImpl& x, int dim,
            const detail::TensorImpl& out, const KernelTable& kernels);
// Backend::reduce of a contiguous half-type x into f32 results (i32 for argmax/argmin), its
// values widened as the loops read them; false (nothing done) for a layout it does not read.
bool reduce_widened(detail::ReduceOp op, const detail::TensorImpl& x, int dim,
                    const detail::TensorImpl& out, const KernelTable& kernels);
// Backend::reduce_prologue, with the element-wise kernels to evaluate the prologue with.
bool reduce_prologue(detail::ReduceOp op, const detail::Prologue& prologue, int dim,
                     const detail::TensorImpl& out, const KernelTable& kernels);
void matmul(const detail::TensorImpl& a, const detail::TensorImpl& b,
            const detail::TensorImpl& out);
// matmul_epilogue.cpp: Backend::matmul_epilogue for f32 (false for the rest: composed).
bool matmul_epilogue(const detail::TensorImpl& a, const detail::TensorImpl& b,
                     const detail::MatmulEpilogue& e, const detail::TensorImpl& out,
                     const KernelTable& kernels);
void random(const detail::RandomSpec& spec, std::uint64_t seed, const detail::TensorImpl& out);
// index.cpp: Backend::index, synchronous (a bad index throws at once), deterministic always.
void index(detail::IndexOp op, const detail::TensorImpl& x, int dim,
           const detail::TensorImpl& index, const detail::TensorImpl* src,
           const detail::TensorImpl& out, const KernelTable& kernels);
// rows.cpp: Backend::rows, with the kernel table's exp, element-wise steps and half conversions.
void rows(detail::RowOp op, const detail::TensorImpl& x, const detail::RowParams& params,
          const detail::TensorImpl& y, const detail::RowStats& stats, const KernelTable& kernels);
// order.cpp: Backend::order, synchronous; indices is null for cumsum.
void order(detail::OrderOp op, const detail::TensorImpl& x, const detail::OrderParams& params,
           const detail::TensorImpl& values, const detail::TensorImpl* indices);
// attention.cpp: Backend::attention, blockwise with sgemm, the kernel table's exp and half
// conversions; lse is null when not asked for.
void attention(const detail::TensorImpl& q, const detail::TensorImpl& k,
               const detail::TensorImpl& v, const detail::AttentionParams& params,
               const detail::TensorImpl& o, const detail::TensorImpl* lse,
               const KernelTable& kernels);
// attention_backward.cpp: Backend::attention_backward, blockwise per (b, h) with sgemm (every
// shape), into contiguous gradients: false, after the contract's check, for strided ones.
bool attention_backward(const detail::TensorImpl& q, const detail::TensorImpl& k,
                        const detail::TensorImpl& v, const detail::TensorImpl& o,
                        const detail::TensorImpl& dout, const detail::TensorImpl& lse,
                        const detail::AttentionParams& params, const detail::TensorImpl& dq,
                        const detail::TensorImpl& dk, const detail::TensorImpl& dv,
                        const KernelTable& kernels);

}  // namespace kiln::cpu
