// kiln::nn::Linear: y = x W^T + b, as torch.nn.Linear (weight [out, in], bias [out]).
// Initialised as PyTorch's: weight and bias uniform in [-1/sqrt(in), 1/sqrt(in)). forward is
// kiln::linear (kiln/linear.hpp): the bias is added in the product's epilogue, and backward takes
// its gradient in the weight gradient's product, where the backend can. Under an autocast guard
// (kiln/autocast.hpp) x, the weight and the bias are cast to the guard's dtype, so the output has
// that dtype, as torch.nn.Linear's under torch.autocast.
#pragma once

#include <optional>

#include "kiln/linear.hpp"
#include "kiln/nn/module.hpp"

namespace kiln::nn {

class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true);

  Parameter<2> weight;  // [out, in]
  Parameter<1> bias;    // [out], undefined without bias

  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }

  // x [..., in] -> [..., out], any rank >= 1. ShapeError when the last dim is not in_features.
  template <std::size_t D>
  requires(D >= 1) Tensor<D> forward(const Tensor<D>& x)
  const {
    check(x.shape()[D - 1], x.dtype());
    std::optional<Tensor<1>> b;
    if (bias.defined()) b = bias.tensor();
    return kiln::linear(x, weight.tensor(), b);
  }
  template <std::size_t D>
  Tensor<D> operator()(const Tensor<D>& x) const {
    return forward(x);
  }

 private:
  void check(std::int64_t last, DType dtype) const;
  std::int64_t in_, out_;
};

}  // namespace kiln::nn
