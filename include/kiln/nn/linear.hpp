// kiln::nn::Linear: y = x W^T + b, as torch.nn.Linear (weight [out, in], bias [out]).
// Initialised as PyTorch's: weight and bias uniform in [-1/sqrt(in), 1/sqrt(in)). A matmul and
// a broadcast add for now; a fused bias epilogue can replace forward's body later. Under an
// autocast guard (kiln/autocast.hpp) the matmul runs in the guard's dtype and the bias is cast to
// it as well, so the output has that dtype, as torch.nn.Linear's under torch.autocast.
#pragma once

#include "kiln/autocast.hpp"
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
    const auto wt = weight.tensor().transpose(0, 1);
    Tensor<D> y;
    if constexpr (D == 2 || D == 3) {
      y = matmul(x, wt);
    } else {
      auto s = x.shape();
      const auto rows = x.numel() / in_;
      auto flat = matmul(x.contiguous().template reshape<2>({rows, in_}), wt);
      s[D - 1] = out_;
      y = flat.template reshape<D>(s);
    }
    if (bias.defined()) y = y + Tensor<1>(detail::autocast_lower(bias.tensor().handle("Linear")));
    return y;
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
