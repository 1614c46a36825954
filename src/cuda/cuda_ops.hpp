// The CUDA backend's ops, one file each, all queued on the context's stream.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/context.hpp"
#if KILN_WITH_AUTOTUNE
#include "tune/tune_key.hpp"
#endif

namespace kiln::cuda {

using detail::TensorImpl;
struct LtState;  // cublaslt_state.hpp

// elementwise.cpp: a generated kernel (src/ir/cuda_codegen.cpp) per program and layout.
void elementwise(Context& ctx, const ir::Program& program,
                 std::span<const TensorImpl* const> inputs, std::span<const double> scalars,
                 std::span<const TensorImpl* const> outputs);
// A contiguous copy of x on the same device (x itself when it is already contiguous).
detail::Handle contiguous(Context& ctx, const detail::Handle& x);

// reduce.cpp: the Backend::reduce contract (src/backend/backend.hpp).
void reduce(Context& ctx, detail::ReduceOp op, const TensorImpl& x, int dim, const TensorImpl& out);
// The Backend::reduce_prologue contract: false, with nothing done, for layouts it declines.
bool reduce_prologue(Context& ctx, detail::ReduceOp op, const detail::Prologue& prologue, int dim,
                     const TensorImpl& out);

// adamw.cpp: Backend::adamw (kernels/adamw.cuh), queued without a host sync; the source of its
// kernel, for the NVRTC compile test.
bool adamw(Context& ctx, std::span<const detail::AdamWTensors> params,
           const detail::AdamWScalars& scalars);
const std::string& adamw_source();

// sum_of_squares.cpp: Backend::sum_of_squares (kernels/sum_of_squares.cuh), queued without a
// host sync; the source of its two kernels, for the NVRTC compile test.
bool sum_of_squares(Context& ctx, std::span<const TensorImpl* const> xs, const TensorImpl& total);
const std::string& sum_of_squares_source();

// matmul.cpp: cuBLASLt, under kiln::float32_matmul_precision().
void matmul(Context& ctx, const TensorImpl& a, const TensorImpl& b, const TensorImpl& out);
// The same with cuBLASLt's epilogue for e (Backend::matmul_epilogue's contract, checked by the
// caller): false, having queued nothing, where cuBLASLt has none for it.
bool matmul_epilogue(Context& ctx, const TensorImpl& a, const TensorImpl& b,
                     const detail::MatmulEpilogue& e, const TensorImpl& out);
#if KILN_WITH_AUTOTUNE
// Runs a stored tuned choice (`value`, as the tuner saved it) once on scratch memory of the
// problem's shape, so that cuBLASLt is set up for its compute type and its kernel is loaded
// before the first real call (cublaslt_state.hpp). Does nothing for kiln's own kernels, a value
// that is no algorithm, one that does not apply, or a problem of more than 64 MiB.
void preload_matmul(Context& ctx, const LtState& lt, const tune::MatmulProblem& problem,
                    const std::string& value);
// For the tests: runs every candidate the tuner would time for out = a @ b (the heuristic's
// algorithms, kiln's own kernels where they take the problem), each writing out, and calls
// after_run(candidate name) once it has finished.
void for_each_matmul_candidate(Context& ctx, const TensorImpl& a, const TensorImpl& b,
                               const TensorImpl& out,
                               const std::function<void(const std::string&)>& after_run);
#endif

// random.cpp: the Philox stream of src/core/philox.hpp, bit for bit.
void random(Context& ctx, const detail::RandomSpec& spec, std::uint64_t seed,
            const TensorImpl& out);

// index.cpp: Backend::index, queued without a host sync; a bad index is recorded on the device
// and raised by raise_index_error, which sync and download call once the stream is idle.
void index(Context& ctx, detail::IndexOp op, const TensorImpl& x, int dim, const TensorImpl& index,
           const TensorImpl* src, const TensorImpl& out);
void raise_index_error(Context& ctx);

// rows.cpp: Backend::rows, one block per row (kernels/rows.cuh), queued without a host sync.
void rows(Context& ctx, detail::RowOp op, const TensorImpl& x, const detail::RowParams& params,
          const TensorImpl& y, const detail::RowStats& stats);

// norm_backward.cpp: Backend::norm_backward (kernels/norm_backward.cuh), queued without a host
// sync; false for rows longer than its kernels hold in registers (8192 elements and up).
bool norm_backward(Context& ctx, detail::RowOp op, const TensorImpl& x, const TensorImpl& g,
                   const TensorImpl* weight, const TensorImpl* mean, const TensorImpl& rstd,
                   const detail::NormGrads& grads);
// The source of every norm_backward kernel of x's dtype t and g's dtype g (t, or a half type for
// an f32 t), writing dx_half of dtype h where given (a half type for an f32 t), and their names
// (for the NVRTC compile test): (v, k) the row kernel of loads of v elements, k loads a thread;
// (0, 0) the kernel that sums the weight's and bias's partials.
const std::string& norm_backward_source(DType t, DType g, std::optional<DType> h = std::nullopt);
std::string norm_backward_kernel_name(DType t, DType g, int v, int k,
                                      std::optional<DType> h = std::nullopt);
std::vector<std::string> norm_backward_kernel_names(DType t, DType g,
                                                    std::optional<DType> h = std::nullopt);

// order.cpp: Backend::order (kernels/order.cuh), queued without a host sync; indices is null for
// cumsum.
void order(Context& ctx, detail::OrderOp op, const TensorImpl& x, const detail::OrderParams& params,
           const TensorImpl& values, const TensorImpl* indices);

// attention.cpp: Backend::attention, flash-style (kernels/attention.cuh: online softmax over tiles
// of keys held in shared memory, the scores never written), queued without a host sync; false
// for a head dim it has no kernel for.
bool attention(Context& ctx, const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
               const detail::AttentionParams& params, const TensorImpl& o, const TensorImpl* lse);
// attention.cpp: Backend::attention_backward (kernels/attention_backward.cuh: a dq kernel, then a
// dk/dv kernel), queued without a host sync; false where the forward has no kernel, and for f32
// head dims over 64 (the key-major kernel's registers would spill).
bool attention_backward(Context& ctx, const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                        const TensorImpl& o, const TensorImpl& dout, const TensorImpl& lse,
                        const detail::AttentionParams& params, const TensorImpl& dq,
                        const TensorImpl& dk, const TensorImpl& dv);
// Whether a kernel exists for dtype t and head dim d (f32: under the current matmul precision),
// and its name and source (the NVRTC compile test builds them all).
bool attention_kernel_available(DType t, std::int64_t d);
// pass: "fwd" (the forward's source), "dq" or "dkv" (the backward's, one source for both).
std::string attention_kernel_name(DType t, int d, const char* pass);
const std::string& attention_source(DType t, int d, bool backward);

}  // namespace kiln::cuda
