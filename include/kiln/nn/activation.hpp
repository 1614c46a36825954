// Activation modules, as torch.nn.GELU (exact, x * Phi(x)), ReLU and SiLU: no parameters, one
// element-wise op each (they fuse with their neighbours), here so that they can sit in a
// Sequential.
#pragma once

#include "kiln/nn/module.hpp"

namespace kiln::nn {

struct GELU : Module {
  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    return x.gelu();
  }
  template <std::size_t D>
  Tensor<D> operator()(const Tensor<D>& x) const {
    return forward(x);
  }
};

struct ReLU : Module {
  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    return x.relu();
  }
  template <std::size_t D>
  Tensor<D> operator()(const Tensor<D>& x) const {
    return forward(x);
  }
};

struct SiLU : Module {
  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    return x.silu();
  }
  template <std::size_t D>
  Tensor<D> operator()(const Tensor<D>& x) const {
    return forward(x);
  }
};

}  // namespace kiln::nn
