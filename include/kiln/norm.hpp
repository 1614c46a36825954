// Row normalisation over the last dim: layer_norm and rms_norm, as torch.nn.functional's
// (normalized_shape = the last dim). Computed in f32 whatever x's dtype; a bf16/f16 result is
// rounded once. weight and bias are [n] tensors of x's dtype, each optional. out_dtype rounds the
// f32 result of an f32 x to bf16 or f16 instead (once, in the same pass: what a half product
// reading it would cast it to). The *_with_stats forms also return the per-row f32 statistics a
// backward pass needs. docs/ops.md says more.
#pragma once

#include <optional>

#include "kiln/tensor.hpp"

namespace kiln {

template <std::size_t D>
struct LayerNormResult {
  Tensor<D> y;
  Tensor<D - 1> mean, rstd;  // f32, shape x.shape[:-1]; rstd = 1 / sqrt(var + eps)
};

template <std::size_t D>
struct RmsNormResult {
  Tensor<D> y;
  Tensor<D - 1> rstd;  // f32, shape x.shape[:-1]; rstd = 1 / sqrt(mean(x^2) + eps)
};

namespace detail {
inline Handle optional_handle(const std::optional<Tensor<1>>& t, const char* op) {
  return t ? t->handle(op) : Handle{};
}
}  // namespace detail

template <std::size_t D>
requires(D >= 1) LayerNormResult<D> layer_norm_with_stats(
    const Tensor<D>& x, const std::optional<Tensor<1>>& weight = std::nullopt,
    const std::optional<Tensor<1>>& bias = std::nullopt, double eps = 1e-5,
    std::optional<DType> out_dtype = std::nullopt) {
  auto r = detail::layer_norm(x.handle("layer_norm"), detail::optional_handle(weight, "layer_norm"),
                              detail::optional_handle(bias, "layer_norm"), eps, out_dtype);
  return {Tensor<D>(r.y), Tensor<D - 1>(r.mean), Tensor<D - 1>(r.rstd)};
}

template <std::size_t D>
requires(D >= 1) Tensor<D> layer_norm(const Tensor<D>& x,
                                      const std::optional<Tensor<1>>& weight = std::nullopt,
                                      const std::optional<Tensor<1>>& bias = std::nullopt,
                                      double eps = 1e-5,
                                      std::optional<DType> out_dtype = std::nullopt) {
  return layer_norm_with_stats(x, weight, bias, eps, out_dtype).y;
}

template <std::size_t D>
requires(D >= 1) RmsNormResult<D> rms_norm_with_stats(
    const Tensor<D>& x, const std::optional<Tensor<1>>& weight = std::nullopt, double eps = 1e-6,
    std::optional<DType> out_dtype = std::nullopt) {
  auto r = detail::rms_norm(x.handle("rms_norm"), detail::optional_handle(weight, "rms_norm"), eps,
                            out_dtype);
  return {Tensor<D>(r.y), Tensor<D - 1>(r.rstd)};
}

template <std::size_t D>
requires(D >= 1) Tensor<D> rms_norm(const Tensor<D>& x,
                                    const std::optional<Tensor<1>>& weight = std::nullopt,
                                    double eps = 1e-6,
                                    std::optional<DType> out_dtype = std::nullopt) {
  return rms_norm_with_stats(x, weight, eps, out_dtype).y;
}

// A pre-norm transformer's residual step in one pass: sum = x + residual (the residual stream
// after a block's branch) and y = layer_norm(sum) (the next branch's input), as FlashAttention's
// and Apex's fused layer norms with a residual. residual has x's shape, and x's dtype or bf16 /
// f16 for an f32 x (a half branch added to an f32 stream); sum has x's dtype, y out_dtype's or
// x's. The same values as `auto sum = x + residual; auto y = layer_norm(sum, ...)` (a half sum is
// normalised as it is stored), with x, residual and sum crossing memory once: where the two ops
// read the sum back, and their backward added the stream's gradient and rounded it for the
// residual in passes of their own, this backward does both in the norm's pass.
template <std::size_t D>
struct AddNormResult {
  Tensor<D> sum, y;
};

template <std::size_t D>
requires(D >=
         1) AddNormResult<D> add_layer_norm(const Tensor<D>& x, const Tensor<D>& residual,
                                            const std::optional<Tensor<1>>& weight = std::nullopt,
                                            const std::optional<Tensor<1>>& bias = std::nullopt,
                                            double eps = 1e-5,
                                            std::optional<DType> out_dtype = std::nullopt) {
  auto r = detail::add_layer_norm(x.handle("add_layer_norm"), residual.handle("add_layer_norm"),
                                  detail::optional_handle(weight, "add_layer_norm"),
                                  detail::optional_handle(bias, "add_layer_norm"), eps, out_dtype);
  return {Tensor<D>(r.sum), Tensor<D>(r.y)};
}

// rms_norm's form of add_layer_norm: sum = x + residual, y = rms_norm(sum).
template <std::size_t D>
requires(D >=
         1) AddNormResult<D> add_rms_norm(const Tensor<D>& x, const Tensor<D>& residual,
                                          const std::optional<Tensor<1>>& weight = std::nullopt,
                                          double eps = 1e-6,
                                          std::optional<DType> out_dtype = std::nullopt) {
  auto r = detail::add_rms_norm(x.handle("add_rms_norm"), residual.handle("add_rms_norm"),
                                detail::optional_handle(weight, "add_rms_norm"), eps, out_dtype);
  return {Tensor<D>(r.sum), Tensor<D>(r.y)};
}

}  // namespace kiln
