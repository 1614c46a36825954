// The contract of Backend::order, checked by every backend before it launches anything: the front
// end has checked already, but a direct backend call must get the same errors, not a read out of
// bounds. What is checked:
//   x         rank >= 1 (ShapeError), contiguous (ValueError)
//   params    topk: 0 <= k <= n (ValueError); the other ops take no k
//   values    x's shape with the last extent order_out_length (ShapeError), order_values_dtype
//             (DTypeError), contiguous (ValueError)
//   indices   given exactly when the op has them (ValueError); values' shape, i32, contiguous
//   n == 0    max and min of rows of zero elements have no value (ValueError) when rows exist
#include <fmt/format.h>

#include "backend/backend.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {

const char* order_op_name(OrderOp op) {
  switch (op) {
    case OrderOp::max:
      return "max";
    case OrderOp::min:
      return "min";
    case OrderOp::sort:
      return "sort";
    case OrderOp::topk:
      return "topk";
    case OrderOp::cumsum:
      return "cumsum";
  }
  return "?";
}

std::int64_t order_out_length(OrderOp op, const OrderParams& p, std::int64_t n) {
  switch (op) {
    case OrderOp::max:
    case OrderOp::min:
      return 1;
    case OrderOp::topk:
      return p.k;
    case OrderOp::sort:
    case OrderOp::cumsum:
      return n;
  }
  return n;
}

DType order_values_dtype(OrderOp op, DType x) {
  if (op == OrderOp::cumsum && !is_floating(x)) return DType::i32;
  return x;
}

namespace {

void check_output(const char* op, const char* what, const TensorImpl& t, const Dims& shape,
                  DType dtype) {
  if (t.dtype != dtype) {
    throw DTypeError(
        fmt::format("{}: {} must be {}, got {}", op, what, dtype_name(dtype), dtype_name(t.dtype)));
  }
  if (t.shape != shape) {
    throw ShapeError(fmt::format("{}: {} must have shape {}, got {}", op, what, format_dims(shape),
                                 format_dims(t.shape)));
  }
  if (!t.is_contiguous()) throw ValueError(fmt::format("{}: {} must be contiguous", op, what));
}

}  // namespace

std::int64_t check_order_call(OrderOp op, const TensorImpl& x, const OrderParams& params,
                              const TensorImpl& values, const TensorImpl* indices) {
  const char* name = order_op_name(op);
  if (x.rank() < 1) throw ShapeError(fmt::format("{}: x must have rank >= 1", name));
  if (!x.is_contiguous()) throw ValueError(fmt::format("{}: x must be contiguous", name));
  const std::int64_t n = x.shape.back();
  if (op == OrderOp::topk && (params.k < 0 || params.k > n)) {
    throw ValueError(
        fmt::format("topk: k = {} is outside [0, {}] (the size of the last dim)", params.k, n));
  }
  if (op != OrderOp::topk && params.k != 0) throw ValueError(fmt::format("{}: takes no k", name));
  if (n > std::int64_t{0x7fffffff}) {
    throw ValueError(fmt::format("{}: a row of {} elements has no i32 index", name, n));
  }
  Dims shape = x.shape;
  shape.back() = order_out_length(op, params, n);
  check_output(name, "values", values, shape, order_values_dtype(op, x.dtype));
  if (order_op_has_indices(op) != (indices != nullptr)) {
    throw ValueError(
        fmt::format("{}: indices must be {}", name, order_op_has_indices(op) ? "given" : "absent"));
  }
  if (indices) check_output(name, "indices", *indices, shape, DType::i32);
  if ((op == OrderOp::max || op == OrderOp::min) && n == 0 && values.numel() > 0) {
    throw ValueError(fmt::format("{}: rows of 0 elements have no {}", name, name));
  }
  return n;
}

}  // namespace kiln::detail
