// Scaled dot-product attention over [B, H, T, D] tensors, as
// torch.nn.functional.scaled_dot_product_attention: softmax(q k^T * scale + mask) v.
// One backend kernel (Backend::attention): q, k and v are read in place (any strides; a head whose
// last dim is strided is copied first), the T x T scores are never written, and autodiff keeps
// q, k, v, o and a per-row logsumexp for backward. Where the device's backend has no kernel, it is
// composed from kiln's ops (batched matmul, a causal masked_fill, softmax, matmul) instead.
#pragma once
#include <optional>

#include "kiln/tensor.hpp"

namespace kiln {

// q [B, H, Tq, D], k and v [B, H, Tk, D] of one floating dtype and device -> [B, H, Tq, D].
// causal masks key j > query i (the upper triangle, aligned at the top-left as PyTorch's
// is_causal). scale defaults to 1 / sqrt(D). ShapeError on mismatched shapes, DTypeError on a
// non-floating or mixed dtype, ValueError on a non-finite scale.
Tensor<4> scaled_dot_product_attention(const Tensor<4>& q, const Tensor<4>& k, const Tensor<4>& v,
                                       bool causal = false,
                                       std::optional<double> scale = std::nullopt);

}  // namespace kiln
