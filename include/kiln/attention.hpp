// Scaled dot-product attention over [B, H, T, D] tensors, as
// torch.nn.functional.scaled_dot_product_attention: softmax(q k^T * scale + mask) v.
// Composed from kiln's ops for now (batched matmul, a causal masked_fill, softmax, matmul), so it
// is differentiable through them; a fused kernel can replace the body without changing callers.
#pragma once
#include <optional>

#include "kiln/tensor.hpp"

namespace kiln {

// q [B, H, Tq, D], k and v [B, H, Tk, D] of one floating dtype and device -> [B, H, Tq, D].
// causal masks key j > query i (the upper triangle, aligned at the top-left as PyTorch's
// is_causal). scale defaults to 1 / sqrt(D). ShapeError on mismatched shapes, DTypeError on a
// non-floating or mixed dtype.
Tensor<4> scaled_dot_product_attention(const Tensor<4>& q, const Tensor<4>& k, const Tensor<4>& v,
                                       bool causal = false,
                                       std::optional<double> scale = std::nullopt);

}  // namespace kiln
