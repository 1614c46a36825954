// The contract of Backend::index, checked by every backend before it launches anything: the front
// end has checked already, but a direct backend call must get the same errors, not a read out of
// bounds. Shapes, dtypes and layouts only; index values are checked by the kernels as they read
// them (throw_index_out_of_range).
#include <fmt/format.h>

#include "backend/backend.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {

const char* index_op_name(IndexOp op) {
  switch (op) {
    case IndexOp::gather:
      return "gather";
    case IndexOp::scatter_add:
      return "scatter_add";
    case IndexOp::index_select:
      return "index_select";
    case IndexOp::index_add:
      return "index_add";
  }
  return "?";
}

void throw_index_out_of_range(IndexOp op, std::int64_t value, std::int64_t bound) {
  throw IndexError(fmt::format("{}: index {} is out of range for a dim of size {} (valid: 0 to {})",
                               index_op_name(op), value, bound, bound - 1));
}

void check_index_call(IndexOp op, const TensorImpl& x, int dim, const TensorImpl& index,
                      const TensorImpl* src, const TensorImpl& out) {
  const char* name = index_op_name(op);
  const bool adds = index_op_accumulates(op);
  if (dim < 0 || dim >= x.rank()) {
    throw IndexError(fmt::format("{}: no dim {} in x {}", name, dim, format_dims(x.shape)));
  }
  if (index.dtype != DType::i32) {
    throw DTypeError(fmt::format("{}: index must be i32, got {}", name, dtype_name(index.dtype)));
  }
  if (out.dtype != x.dtype || (adds && (!src || src->dtype != x.dtype))) {
    throw DTypeError(
        fmt::format("{}: x, src and out must share one dtype ({})", name, dtype_name(x.dtype)));
  }
  if (adds && x.dtype == DType::boolean) {
    throw DTypeError(fmt::format("{}: bool has no addition; cast to i32 first", name));
  }
  if (adds != (src != nullptr)) {
    throw ValueError(fmt::format("{}: src is {}", name, adds ? "missing" : "not taken"));
  }
  // The [O, K, I] shape of the index side: x's shape with dim's extent set to K.
  const bool per_element = op == IndexOp::gather || op == IndexOp::scatter_add;
  if (!per_element && index.rank() != 1) {
    throw ShapeError(
        fmt::format("{}: index must have rank 1, got {}", name, format_dims(index.shape)));
  }
  Dims k_shape = x.shape;
  k_shape[dim] = per_element ? (index.rank() == x.rank() ? index.shape[dim] : -1) : index.shape[0];
  if (per_element && index.shape != k_shape) {
    throw ShapeError(fmt::format("{}: index {} must match x {} outside dim {}", name,
                                 format_dims(index.shape), format_dims(x.shape), dim));
  }
  const Dims& want_out = adds ? x.shape : k_shape;
  if (out.shape != want_out || (src && src->shape != k_shape)) {
    throw ShapeError(fmt::format(
        "{}: out {}{} for x {} and index {} (expected out {}{})", name, format_dims(out.shape),
        src ? ", src " + format_dims(src->shape) : std::string(), format_dims(x.shape),
        format_dims(index.shape), format_dims(want_out),
        src ? ", src " + format_dims(k_shape) : std::string()));
  }
  if (!x.is_contiguous() || !index.is_contiguous() || !out.is_contiguous() ||
      (src && !src->is_contiguous())) {
    throw ValueError(fmt::format("{}: every operand must be contiguous", name));
  }
}

}  // namespace kiln::detail
