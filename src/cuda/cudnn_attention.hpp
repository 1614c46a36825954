// Attention through cuDNN's fused SDPA (the flash kernels PyTorch's scaled_dot_product_attention
// runs on Hopper), for bf16 and f16: the first thing Backend::attention and attention_backward try
// on CUDA (attention.cpp), before kiln's own kernels.
//
// Each returns false, having queued nothing, where cuDNN does not run the call: cuDNN compiled out
// or switched off (KILN_CUDNN=0), libcudnn absent, a dtype other than bf16/f16, an empty operand,
// a scale of 0 or below (cudnn_attention.cpp says why), or a problem cuDNN's engines do not support
// (a head dim, a layout, an alignment; remembered per problem, so it is asked once). Each call is
// checked by the caller against the backend contract first; the graphs are built once per problem
// (shapes, strides, dtype, causal, scale, whether lse is written, deterministic mode) and kept for
// the process.
#pragma once

#include "backend/backend.hpp"
#include "cuda/context.hpp"

namespace kiln::cuda {

using detail::TensorImpl;

bool cudnn_attention(Context& ctx, const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                     const detail::AttentionParams& params, const TensorImpl& o,
                     const TensorImpl* lse);

// With kiln::deterministic() on, cuDNN's deterministic backward (dq summed in a fixed order), or
// false where cuDNN has none for the problem.
bool cudnn_attention_backward(Context& ctx, const TensorImpl& q, const TensorImpl& k,
                              const TensorImpl& v, const TensorImpl& o, const TensorImpl& dout,
                              const TensorImpl& lse, const detail::AttentionParams& params,
                              const TensorImpl& dq, const TensorImpl& dk, const TensorImpl& dv);

// cuDNN attention calls this process ran (forward and backward), for tests and kiln doctor.
long long cudnn_attention_runs();

}  // namespace kiln::cuda
