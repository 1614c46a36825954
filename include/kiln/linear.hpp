// A linear layer's forward as one op, as torch.nn.functional.linear followed by an activation:
// y = act(x W^T + bias), weight [out, in], bias [out]. The bias and the activation run in the
// matmul's own epilogue where the backend has one (CUDA: cuBLASLt's BIAS, RELU_BIAS and
// GELU_BIAS epilogues, tuned and stored like a plain product; CPU: one threaded pass over the
// BLAS's output); autodiff's backward is the products, one element-wise pass for the activation's
// gradient and a column sum for the bias's. Elsewhere it is composed from kiln's ops.
// Under an autocast guard x, weight and bias are cast to its dtype, as torch.nn.Linear's are.
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/tensor.hpp"

namespace kiln {

enum class Activation : std::uint8_t {
  none,
  relu,
  gelu,       // exact, x Phi(x), as Tensor::gelu (applied after the product: cuBLASLt has no such
              // epilogue)
  gelu_tanh,  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), PyTorch's approximate="tanh"
              // (GPT-2's original), in the epilogue
  silu        // applied after the product, as gelu
};
const char* activation_name(Activation a);

namespace detail {
Handle linear(const Handle& x, const Handle& weight, const Handle& bias, Activation act);
}  // namespace detail

// x [..., in] -> [..., out]. ShapeError when x's last dim is not weight's second or bias is not
// [out]; DTypeError on mixed or non-floating dtypes; DeviceError on mixed devices.
template <std::size_t D>
requires(D >= 1) Tensor<D> linear(const Tensor<D>& x, const Tensor<2>& weight,
                                  const std::optional<Tensor<1>>& bias = std::nullopt,
                                  Activation act = Activation::none) {
  return Tensor<D>(detail::linear(x.handle("linear"), weight.handle("linear"),
                                  bias ? bias->handle("linear") : detail::Handle{}, act));
}

}  // namespace kiln
