// Multi-head self-attention over [B, T, C], as nanoGPT's CausalSelfAttention (PyTorch names:
// c_attn projects to q, k and v at once, c_proj projects the heads back). The attention itself
// is kiln::scaled_dot_product_attention, so a fused kernel there speeds this up unchanged.
#pragma once
#include "kiln/attention.hpp"
#include "kiln/nn/dropout.hpp"
#include "kiln/nn/linear.hpp"

namespace kiln::nn {

class MultiHeadAttention : public Module {
 public:
  // dim must divide into heads (ValueError otherwise). dropout applies to the output projection
  // (nanoGPT's resid_dropout) in training.
  MultiHeadAttention(std::int64_t dim, std::int64_t heads, bool causal = true, double dropout = 0.0,
                     bool bias = true);

  // x [B, T, dim] -> [B, T, dim].
  Tensor<3> forward(const Tensor<3>& x) const;
  Tensor<3> operator()(const Tensor<3>& x) const { return forward(x); }

  std::int64_t heads() const { return heads_; }
  bool causal() const { return causal_; }

  Linear c_attn, c_proj;
  Dropout resid_dropout;

 private:
  std::int64_t dim_, heads_;
  bool causal_;
};

}  // namespace kiln::nn
