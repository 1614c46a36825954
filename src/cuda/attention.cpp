// The CUDA backend's attention (Backend::attention). Not written yet: it declines every call, and
// the front end composes the attention from matmul and softmax.
#include "cuda/cuda_ops.hpp"

namespace kiln::cuda {

bool attention(Context&, const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
               const detail::AttentionParams& params, const TensorImpl& o, const TensorImpl* lse) {
  detail::check_attention_call(q, k, v, params, o, lse);
  return false;
}

}  // namespace kiln::cuda
