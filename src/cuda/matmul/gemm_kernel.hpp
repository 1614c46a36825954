// kiln's own matrix-product kernels on CUDA (CUDA C in src/cuda/kernels/gemm*.cuh, gemm_source.cpp,
// compiled with NVRTC for the device's exact architecture): candidates beside cuBLASLt's
// algorithms. The tiling and the accuracy of each variant are explained in gemm_kernel.cpp.
#pragma once

#include <optional>

#include "backend/backend.hpp"
#include "cuda/context.hpp"
#include "cuda/matmul/gemm_source.hpp"

namespace kiln::cuda {

using detail::TensorImpl;

// The tile own_gemm takes for this problem when none is asked for: the largest of 128x128,
// 128x64, 64x64 that still gives every SM a block, else 64x64 (the most blocks).
GemmTile default_gemm_tile(GemmVariant v, std::int64_t batch, std::int64_t m, std::int64_t n,
                           int sm_count);

// Queues out[b] = a[b] @ c[b] (a [B, m, k], c [B, k, n], out [B, m, n] contiguous; a and c any
// strides, stride 0 on a broadcast batch) with kiln's generated kernel on ctx.stream, with
// `tile` or default_gemm_tile(). Returns false, queuing nothing, when the variant cannot run
// this problem on this device (see gemm_kernel.cpp). Throws ShapeError / DTypeError for
// operands that break the contract above, DeviceError when compiling or launching fails.
bool own_gemm(Context& ctx, GemmVariant v, const TensorImpl& a, const TensorImpl& c,
              const TensorImpl& out, std::optional<GemmTile> tile = std::nullopt);

// Whether own_gemm(ctx, v, a, c, out) would run without compiling (its kernel is in memory or in
// the store; it is then loaded). With wait, compiles it when it is not (true); without, starts
// its compile in the background (compile_in_background) and returns false. True when own_gemm
// has nothing to compile (it declines the problem, or out is empty).
bool own_gemm_ready(Context& ctx, GemmVariant v, const TensorImpl& a, const TensorImpl& c,
                    const TensorImpl& out, bool wait);

}  // namespace kiln::cuda
