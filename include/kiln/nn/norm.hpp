// kiln::nn::LayerNorm and RMSNorm over the last dim, as torch.nn.LayerNorm / torch.nn.RMSNorm
// with normalized_shape = [n]: weight initialised to ones, LayerNorm's bias to zeros. The row
// kernels of kiln/norm.hpp do the work.
#pragma once

#include "kiln/nn/module.hpp"
#include "kiln/norm.hpp"

namespace kiln::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::int64_t n, double eps = 1e-5, bool bias = true);

  Parameter<1> weight, bias;  // [n]; bias undefined without one

  // out_dtype: kiln::layer_norm's (the result of an f32 x rounded to a half type in the pass).
  template <std::size_t D>
  requires(D >= 1) Tensor<D> forward(const Tensor<D>& x,
                                     std::optional<DType> out_dtype = std::nullopt)
  const {
    std::optional<Tensor<1>> b;
    if (bias.defined()) b = bias.tensor();
    return layer_norm(x, weight.tensor(), b, eps_, out_dtype);
  }
  template <std::size_t D>
  Tensor<D> operator()(const Tensor<D>& x, std::optional<DType> out_dtype = std::nullopt) const {
    return forward(x, out_dtype);
  }
  // The residual step of a pre-norm block: {x + residual, this norm of it}, in one pass
  // (kiln::add_layer_norm).
  template <std::size_t D>
  requires(D >= 1) AddNormResult<D> add(const Tensor<D>& x, const Tensor<D>& residual,
                                        std::optional<DType> out_dtype = std::nullopt)
  const {
    std::optional<Tensor<1>> b;
    if (bias.defined()) b = bias.tensor();
    return add_layer_norm(x, residual, weight.tensor(), b, eps_, out_dtype);
  }

 private:
  double eps_;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(std::int64_t n, double eps = 1e-6);

  Parameter<1> weight;  // [n]

  template <std::size_t D>
  requires(D >= 1) Tensor<D> forward(const Tensor<D>& x,
                                     std::optional<DType> out_dtype = std::nullopt)
  const { return rms_norm(x, weight.tensor(), eps_, out_dtype); }
  template <std::size_t D>
  Tensor<D> operator()(const Tensor<D>& x, std::optional<DType> out_dtype = std::nullopt) const {
    return forward(x, out_dtype);
  }
  // {x + residual, this norm of it}, in one pass (kiln::add_rms_norm).
  template <std::size_t D>
  requires(D >= 1) AddNormResult<D> add(const Tensor<D>& x, const Tensor<D>& residual,
                                        std::optional<DType> out_dtype = std::nullopt)
  const { return add_rms_norm(x, residual, weight.tensor(), eps_, out_dtype); }

 private:
  double eps_;
};

}  // namespace kiln::nn
