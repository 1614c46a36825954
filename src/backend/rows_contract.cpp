// The contract of Backend::rows, checked by every backend before it launches anything: the front
// end has checked already, but a direct backend call must get the same errors, not a read out of
// bounds. What is checked:
//   x         f32, bf16 or f16 (DTypeError), rank >= 1 (ShapeError), readable as rows (row_view:
//             ValueError otherwise)
//   y         x's shape (ShapeError) and dtype (DTypeError; the norms of an f32 x may write bf16
//             or f16), contiguous (ValueError); logsumexp: f32 of shape x.shape[:-1]
//   params    softmax and log_softmax take no weight, bias or eps; rms_norm no bias (ValueError);
//             weight and bias are [n] (ShapeError), x's dtype (DTypeError), contiguous; eps >= 0
//   stats     norms only; mean for layer_norm only (ValueError); f32 (DTypeError), shape
//             x.shape[:-1] (ShapeError), contiguous
//   residual  norms only, with sum and never without it (ValueError); x's shape (ShapeError), x's
//             dtype or a half type for an f32 x (DTypeError), contiguous, and x contiguous too
//             (ValueError); sum x's shape and dtype, contiguous
//   n == 0    a norm of rows of zero elements has no mean, and logsumexp refuses them too
//             (ValueError) when rows exist
// and of Backend::norm_backward, likewise:
//   op        layer_norm or rms_norm (ValueError)
//   x         as rows()'s, and contiguous (ValueError); g x's shape (ShapeError) and dtype, or bf16
//             or f16 for an f32 x (DTypeError), contiguous
//   weight    as rows()'s; mean (layer_norm only, required) and rstd (required) as rows()'s stats
//   grads     dx x's shape and dtype, dw and db [n] of x's dtype, contiguous; dw only with a
//             weight, db only for layer_norm (ValueError); dsum (x's shape and dtype) and dx_half
//             (a half type of x's shape, x f32) contiguous, each only with dx (ValueError)
#include <fmt/format.h>

#include "backend/backend.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {

const char* row_op_name(RowOp op) {
  switch (op) {
    case RowOp::softmax:
      return "softmax";
    case RowOp::log_softmax:
      return "log_softmax";
    case RowOp::layer_norm:
      return "layer_norm";
    case RowOp::rms_norm:
      return "rms_norm";
    case RowOp::logsumexp:
      return "logsumexp";
  }
  return "?";
}

std::optional<RowView> row_view(const TensorImpl& x) {
  if (x.rank() < 1) return std::nullopt;
  RowView v;
  v.n = x.shape.back();
  v.rows = 1;
  for (int d = 0; d + 1 < x.rank(); ++d) v.rows *= x.shape[d];
  v.stride = v.n;
  if (v.rows == 0 || v.n == 0) return v;  // nothing is read
  if (v.n > 1 && x.strides.back() != 1) return std::nullopt;
  // The leading dims, innermost first, must be one arithmetic sequence of rows.
  bool first = true;
  std::int64_t expect = 0;
  for (int d = x.rank() - 2; d >= 0; --d) {
    if (x.shape[d] == 1) continue;
    if (first) {
      v.stride = x.strides[d];
      first = false;
    } else if (x.strides[d] != expect) {
      return std::nullopt;
    }
    expect = x.strides[d] * x.shape[d];
  }
  return v;
}

namespace {

void check_param(const char* op, const char* what, const TensorImpl* p, const TensorImpl& x) {
  if (!p) return;
  if (p->rank() != 1 || p->shape[0] != x.shape.back()) {
    throw ShapeError(fmt::format("{}: {} must have shape [{}], got {}", op, what, x.shape.back(),
                                 format_dims(p->shape)));
  }
  if (p->dtype != x.dtype) {
    throw DTypeError(fmt::format("{}: {} is {} but x is {}", op, what, dtype_name(p->dtype),
                                 dtype_name(x.dtype)));
  }
  if (!p->is_contiguous()) throw ValueError(fmt::format("{}: {} must be contiguous", op, what));
}

void check_stat(const char* op, const char* what, const TensorImpl* s, const TensorImpl& x) {
  if (!s) return;
  const Dims want(x.shape.begin(), x.shape.end() - 1);
  if (s->dtype != DType::f32) {
    throw DTypeError(fmt::format("{}: {} must be f32, got {}", op, what, dtype_name(s->dtype)));
  }
  if (s->shape != want) {
    throw ShapeError(fmt::format("{}: {} must have shape {} for x {}, got {}", op, what,
                                 format_dims(want), format_dims(x.shape), format_dims(s->shape)));
  }
  if (!s->is_contiguous()) throw ValueError(fmt::format("{}: {} must be contiguous", op, what));
}
const TensorImpl* stat(const std::optional<Out>& s) { return s ? &**s : nullptr; }

// t of `shape` and x's dtype (or, where half_of_f32 allows it, a half type for an f32 x),
// contiguous.
void check_like(const char* op, const char* what, const TensorImpl& t, const Dims& shape,
                const TensorImpl& x, bool half_of_f32 = false) {
  if (t.shape != shape) {
    throw ShapeError(fmt::format("{}: {} {} must have shape {}", op, what, format_dims(t.shape),
                                 format_dims(shape)));
  }
  if (t.dtype != x.dtype && !(half_of_f32 && x.dtype == DType::f32 && is_half(t.dtype))) {
    throw DTypeError(fmt::format("{}: {} is {} but x is {}", op, what, dtype_name(t.dtype),
                                 dtype_name(x.dtype)));
  }
  if (!t.is_contiguous()) throw ValueError(fmt::format("{}: {} must be contiguous", op, what));
}

void check_x(const char* name, const TensorImpl& x) {
  if (!is_floating(x.dtype)) {
    throw DTypeError(
        fmt::format("{}: x must be f32, bf16 or f16, got {}", name, dtype_name(x.dtype)));
  }
  if (x.rank() < 1) throw ShapeError(fmt::format("{}: x must have rank >= 1", name));
}

}  // namespace

RowView check_rows_call(RowOp op, const TensorImpl& x, const RowParams& params, const TensorImpl& y,
                        const RowStats& stats) {
  const char* name = row_op_name(op);
  check_x(name, x);
  const bool reduces = row_op_reduces(op);
  const DType y_dtype = reduces ? DType::f32 : x.dtype;
  const Dims y_shape = reduces ? Dims(x.shape.begin(), x.shape.end() - 1) : x.shape;
  // A norm of an f32 x may round its y to a half type (what a half product reads next).
  const bool half_y = row_op_normalises(op) && x.dtype == DType::f32 && is_half(y.dtype);
  if (y.dtype != y_dtype && !half_y) {
    throw DTypeError(
        fmt::format("{}: y is {} but must be {}", name, dtype_name(y.dtype), dtype_name(y_dtype)));
  }
  if (y.shape != y_shape) {
    throw ShapeError(fmt::format("{}: y {} must have shape {}", name, format_dims(y.shape),
                                 format_dims(y_shape)));
  }
  if (!y.is_contiguous()) throw ValueError(fmt::format("{}: y must be contiguous", name));
  const bool norm = row_op_normalises(op);
  if (!norm && (params.weight || params.bias || stats.mean || stats.rstd)) {
    throw ValueError(fmt::format("{}: takes no weight, bias or statistics", name));
  }
  if (op == RowOp::rms_norm && (params.bias || stats.mean)) {
    throw ValueError(fmt::format("{}: takes no bias and writes no mean", name));
  }
  if (norm && !(params.eps >= 0)) {
    throw ValueError(fmt::format("{}: eps must be >= 0, got {}", name, params.eps));
  }
  check_param(name, "weight", params.weight, x);
  check_param(name, "bias", params.bias, x);
  check_stat(name, "mean", stat(stats.mean), x);
  check_stat(name, "rstd", stat(stats.rstd), x);
  if ((params.residual != nullptr) != stats.sum.has_value()) {
    throw ValueError(fmt::format("{}: a residual and its sum come together", name));
  }
  if (params.residual) {
    if (!norm) throw ValueError(fmt::format("{}: takes no residual", name));
    check_like(name, "residual", *params.residual, x.shape, x, /*half_of_f32=*/true);
    check_like(name, "sum", **stats.sum, x.shape, x);
    if (!x.is_contiguous()) {
      throw ValueError(fmt::format("{}: x must be contiguous when a residual is added", name));
    }
  }
  const std::optional<RowView> v = row_view(x);
  if (!v) {
    throw ValueError(fmt::format(
        "{}: x (shape {}, strides {}) is not a sequence of rows with a unit-stride last dim; "
        "copy it first",
        name, format_dims(x.shape), format_dims(x.strides)));
  }
  if ((norm || reduces) && v->n == 0 && v->rows > 0) {
    throw ValueError(fmt::format("{}: needs rows of at least 1 element", name));
  }
  return *v;
}

RowView check_norm_backward_call(RowOp op, const TensorImpl& x, const TensorImpl& g,
                                 const TensorImpl* weight, const TensorImpl* mean,
                                 const TensorImpl& rstd, const NormGrads& grads) {
  const std::string name = fmt::format("{} backward", row_op_name(op));
  if (!row_op_normalises(op)) throw ValueError(fmt::format("{}: not a norm", name));
  check_x(name.c_str(), x);
  if (!x.is_contiguous()) throw ValueError(fmt::format("{}: x must be contiguous", name));
  check_like(name.c_str(), "g", g, x.shape, x, /*half_of_f32=*/true);
  check_param(name.c_str(), "weight", weight, x);
  const bool layer = op == RowOp::layer_norm;
  if (layer != (mean != nullptr)) {
    throw ValueError(
        fmt::format("{}: {}", name, layer ? "needs the forward's mean" : "takes no mean"));
  }
  check_stat(name.c_str(), "mean", mean, x);
  check_stat(name.c_str(), "rstd", &rstd, x);
  if (grads.dw && !weight) throw ValueError(fmt::format("{}: dw without a weight", name));
  if (grads.db && !layer) throw ValueError(fmt::format("{}: rms_norm has no bias", name));
  const Dims param_shape{x.shape.back()};
  if (grads.dx) check_like(name.c_str(), "dx", **grads.dx, x.shape, x);
  if (grads.dw) check_like(name.c_str(), "dw", **grads.dw, param_shape, x);
  if (grads.db) check_like(name.c_str(), "db", **grads.db, param_shape, x);
  if ((grads.dsum || grads.dx_half) && !grads.dx) {
    throw ValueError(fmt::format("{}: dsum and dx_half need dx", name));
  }
  if (grads.dsum) check_like(name.c_str(), "dsum", *grads.dsum, x.shape, x);
  if (grads.dx_half) {
    const TensorImpl& h = **grads.dx_half;
    check_like(name.c_str(), "dx_half", h, x.shape, x, /*half_of_f32=*/true);
    if (!is_half(h.dtype) || x.dtype != DType::f32) {
      throw DTypeError(fmt::format("{}: dx_half must be bf16 or f16 for an f32 x, got {} for {}",
                                   name, dtype_name(h.dtype), dtype_name(x.dtype)));
    }
  }
  const RowView v = *row_view(x);  // contiguous: always rows
  if (v.n == 0 && v.rows > 0)
    throw ValueError(fmt::format("{}: needs rows of at least 1 element", name));
  return v;
}

}  // namespace kiln::detail
