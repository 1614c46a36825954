// Autocast's state (one optional dtype per thread) and the two casts an op applies to its
// operands under it. Which op applies which is decided at the op (docs/autocast.md lists them):
//   lower-precision list (operands cast to the autocast dtype): matmul, and through it
//     nn::Linear (its bias too) and scaled_dot_product_attention (q, k, v on entry);
//   f32 list (half operands cast to f32, result f32): softmax, log_softmax, layer_norm, rms_norm,
//     sum, mean, cumsum, the element-wise ops of autocast_to_f32 below, nll_loss (so
//     cross_entropy) and mse_loss;
//   every other op runs in its operands' dtypes, and a binary op of a half and an f32 operand
//   computes in f32 by the usual promotion (bf16 op f32 -> f32, as PyTorch's).
#include <fmt/format.h>

#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

// Thread-local as PyTorch's autocast state: a guard on a training thread changes nothing for a
// data-loading or evaluation thread beside it.
thread_local std::optional<DType> autocast_to;

}  // namespace

std::optional<DType> autocast_dtype() { return autocast_to; }

void set_autocast_dtype(std::optional<DType> dtype) {
  if (dtype && !is_half(*dtype)) {
    throw ValueError(fmt::format(
        "Autocast: the dtype must be bf16 or f16 (std::nullopt turns autocast off), got {}",
        dtype_name(*dtype)));
  }
  autocast_to = dtype;
}

Handle autocast_lower(const Handle& x) {
  if (!autocast_to || !is_floating(x->dtype) || x->dtype == *autocast_to) return x;
  if (x->is_contiguous() || !x->is_dense()) return cast(x, *autocast_to);
  // A transposed (or permuted) dense view, as nn::Linear's W^T, is cast in its memory's order and
  // seen through the same strides: the cast reads memory in order, and its gradient comes back
  // in the weight's own layout (a transposed copy and a zero fill per weight and step before).
  auto block = std::make_shared<TensorImpl>(*x);
  block->shape = {x->numel()};
  block->strides = {1};
  auto lowered = std::make_shared<TensorImpl>(*cast(block, *autocast_to));
  lowered->shape = x->shape;
  lowered->strides = x->strides;
  return lowered;
}

Handle autocast_f32(const Handle& x) {
  if (!autocast_to || !is_half(x->dtype)) return x;
  return cast(x, DType::f32);
}

// PyTorch's f32 list holds these of kiln's element-wise ops: exp and log overflow or lose the
// small values in half precision, tan and rsqrt blow up near their poles, pow does both. sin,
// sqrt, tanh, the activations and arithmetic are not on it and keep their operands' dtype.
bool autocast_to_f32(Unary op) {
  return op == Unary::exp || op == Unary::log || op == Unary::tan || op == Unary::rsqrt;
}

bool autocast_to_f32(Binary op) { return op == Binary::pow; }

}  // namespace kiln::detail
