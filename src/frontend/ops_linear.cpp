// kiln::linear: y = act(x W^T + bias) as one Backend::matmul_epilogue call where the backend
// has the epilogue, else composed from matmul, a broadcast add and the activation's ops.
#include <fmt/format.h>

#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"
#include "kiln/linear.hpp"

namespace kiln {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::none:
      return "none";
    case Activation::relu:
      return "relu";
    case Activation::gelu:
      return "gelu";
    case Activation::gelu_tanh:
      return "gelu_tanh";
    case Activation::silu:
      return "silu";
  }
  return "?";
}

namespace detail {
namespace {

// The activation the epilogue applies; gelu and silu are applied after it, by element-wise ops.
EpilogueActivation in_epilogue(Activation act) {
  switch (act) {
    case Activation::relu:
      return EpilogueActivation::relu;
    case Activation::gelu_tanh:
      return EpilogueActivation::gelu_tanh;
    case Activation::none:
    case Activation::gelu:
    case Activation::silu:
      break;
  }
  return EpilogueActivation::none;
}

// The epilogue's activation composed from element-wise ops (the fusion decorator makes them one
// kernel).
Handle activate(EpilogueActivation act, const Handle& z) {
  switch (act) {
    case EpilogueActivation::none:
      return z;
    case EpilogueActivation::relu:
      return unary(Unary::relu, z);
    case EpilogueActivation::gelu_tanh: {
      const Handle cube = binary(Binary::mul, binary(Binary::mul, z, z), z);
      const Handle inner =
          binary(Binary::add, z, binary(Binary::mul, cube, Scalar{0.044715, false}));
      const Handle t =
          unary(Unary::tanh, binary(Binary::mul, inner, Scalar{0.7978845608028654, false}));
      return binary(Binary::mul, binary(Binary::mul, z, Scalar{0.5, false}),
                    binary(Binary::add, t, Scalar{1.0, false}));
    }
  }
  return z;
}

void check(const Handle& x, const Handle& w, const Handle& bias) {
  if (w->rank() != 2) {
    throw ShapeError(
        fmt::format("linear: weight must be [out, in], got {}", format_dims(w->shape)));
  }
  if (x->rank() < 1 || x->shape.back() != w->shape[1]) {
    throw ShapeError(fmt::format("linear: x {} does not end in weight {}'s in_features {}",
                                 format_dims(x->shape), format_dims(w->shape), w->shape[1]));
  }
  if (bias && bias->shape != Dims{w->shape[0]}) {
    throw ShapeError(fmt::format("linear: bias must be [{}] (weight's out_features), got {}",
                                 w->shape[0], format_dims(bias->shape)));
  }
  for (const Handle* t : {&w, &bias}) {
    if (*t && (*t)->dtype != x->dtype) {
      throw DTypeError(
          fmt::format("linear: x, weight and bias must share a dtype, got {} and {} "
                      "(convert one with .to(dtype))",
                      dtype_name(x->dtype), dtype_name((*t)->dtype)));
    }
  }
  if (!is_floating(x->dtype)) {
    throw DTypeError(fmt::format("linear: needs a floating dtype, got {}", dtype_name(x->dtype)));
  }
}

}  // namespace

Handle linear(const Handle& x_in, const Handle& w_in, const Handle& bias_in, Activation act) {
  const Device d = bias_in ? common_device("linear", {&x_in, &w_in, &bias_in})
                           : common_device("linear", {&x_in, &w_in});
  const Handle x = autocast_lower(x_in), w = autocast_lower(w_in);
  const Handle bias = bias_in ? autocast_lower(bias_in) : Handle{};
  check(x, w, bias);
  Backend& be = backend_of(d);
  const DType dtypes[] = {x->dtype, x->dtype};
  if (!be.supports(BackendOp::matmul, dtypes)) {
    throw DTypeError(
        fmt::format("linear: {} does not run {} products", be.name(), dtype_name(x->dtype)));
  }
  const std::int64_t k = w->shape[1], n = w->shape[0];
  Dims rows_shape(x->shape.begin(), x->shape.end() - 1);
  const std::int64_t m = numel(rows_shape);
  // x as [1, m, k] (a view where its rows are evenly spaced), W^T as [1, k, n] in place.
  const Handle x2 = reshape(x, {m, k});
  TensorImpl a = *x2, c = *w;
  a.shape = {1, m, k};
  a.strides = {m * k, x2->strides[0], x2->strides[1]};
  c.shape = {1, k, n};
  c.strides = {k * n, w->strides[1], w->strides[0]};
  const Handle out = allocate("linear", be, {1, m, n}, x->dtype);

  const EpilogueActivation fused = in_epilogue(act);
  MatmulEpilogue e;
  e.bias = bias.get();
  e.activation = fused;
  Handle y = out;
  if (!be.matmul_epilogue(a, c, e, Out(*out))) {
    if (out->numel() > 0) be.matmul(a, c, Out(*out));
    if (bias) y = binary(Binary::add, y, bias);
    y = activate(fused, y);
  }
  if (act == Activation::gelu) y = unary(Unary::gelu, y);
  if (act == Activation::silu) y = unary(Unary::silu, y);
  rows_shape.push_back(n);
  return reshape(y, rows_shape);
}

}  // namespace detail
}  // namespace kiln
