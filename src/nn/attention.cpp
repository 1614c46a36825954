// MultiHeadAttention (kiln/nn/attention.hpp): one projection to q, k, v; heads split out of the
// feature dim and moved before time ([B, H, T, D]); attention; heads joined back; projection.
#include "kiln/nn/attention.hpp"

namespace kiln::nn {
namespace {

std::int64_t checked_heads(std::int64_t dim, std::int64_t heads) {
  if (heads <= 0 || dim <= 0 || dim % heads != 0)
    throw ValueError("MultiHeadAttention: dim " + std::to_string(dim) +
                     " must be a positive multiple of heads " + std::to_string(heads));
  return heads;
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(std::int64_t dim, std::int64_t heads, bool causal,
                                       double dropout, bool bias)
    : c_attn(dim, 3 * dim, bias),
      c_proj(dim, dim, bias),
      resid_dropout(dropout),
      dim_(dim),
      heads_(checked_heads(dim, heads)),
      causal_(causal) {
  register_module("c_attn", c_attn);
  register_module("c_proj", c_proj);
  register_module("resid_dropout", resid_dropout);
}

Tensor<3> MultiHeadAttention::forward(const Tensor<3>& x) const {
  // (Plain variables, not a structured binding: clang 14 cannot capture one in the lambda.)
  const std::int64_t b = x.size(0), t = x.size(1), c = x.size(2);
  if (c != dim_)
    throw ShapeError("MultiHeadAttention: expected " + std::to_string(dim_) + " features, got " +
                     std::to_string(c));
  const auto qkv = c_attn(x).split(dim_, 2);
  auto heads = [&](const Tensor<3>& y) {
    return y.reshape(Shape<4>{b, t, heads_, dim_ / heads_}).transpose(1, 2);
  };
  const auto y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), causal_);
  return resid_dropout(c_proj(y.transpose(1, 2).reshape(Shape<3>{b, t, c})));
}

}  // namespace kiln::nn
