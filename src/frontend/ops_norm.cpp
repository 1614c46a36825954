// layer_norm and rms_norm (and their add_ forms) over the last dim, one checked path for the four,
// and the one front-end path to Backend::rows (which softmax and log_softmax over the last dim
// take too, src/frontend/ops_reduce.cpp): the checks, a copy of x where it is not a sequence of
// rows, the outputs, one backend call.
#include <fmt/format.h>

#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

// weight / bias must be [n] (n = x's last extent), on x's device, of x's dtype.
void check_affine(const char* op, const char* what, const Handle& p, const Handle& x) {
  if (!p) return;
  common_device(op, {&x, &p});
  const std::int64_t n = x->shape.back();
  if (p->shape.size() != 1 || p->shape[0] != n) {
    throw ShapeError(fmt::format("{}: {} must have shape [{}] (the last extent of x {}), got {}",
                                 op, what, n, format_dims(x->shape), format_dims(p->shape)));
  }
  if (p->dtype != x->dtype) {
    throw DTypeError(fmt::format("{}: {} is {} but x is {}", op, what, dtype_name(p->dtype),
                                 dtype_name(x->dtype)));
  }
}

void check_input(const char* op, const Handle& x, double eps) {
  if (x->shape.empty()) throw ShapeError(fmt::format("{}: x must have rank >= 1", op));
  if (!is_floating(x->dtype)) {
    throw DTypeError(
        fmt::format("{}: x must be f32, bf16 or f16, got {}", op, dtype_name(x->dtype)));
  }
  if (!(eps >= 0)) throw ValueError(fmt::format("{}: eps must be >= 0, got {}", op, eps));
  if (x->shape.back() == 0) {
    // Rows of zero elements have no mean; an empty batch of rows is fine.
    bool rows_exist = true;
    for (std::size_t i = 0; i + 1 < x->shape.size(); ++i) rows_exist = rows_exist && x->shape[i];
    if (rows_exist) throw ValueError(fmt::format("{}: cannot normalise rows of 0 elements", op));
  }
}

// A parameter as the backend reads it: contiguous.
Handle dense(const Handle& p) { return p && !is_contiguous(p) ? contiguous(p) : p; }

// y_dtype, where given: x's dtype, or a half type for an f32 x.
void check_y_dtype(const char* op, const Handle& x, std::optional<DType> y_dtype) {
  if (!y_dtype || *y_dtype == x->dtype || (x->dtype == DType::f32 && is_half(*y_dtype))) return;
  throw DTypeError(fmt::format("{}: out_dtype {} for x {}: x's dtype, or bf16 or f16 for an f32 x",
                               op, dtype_name(*y_dtype), dtype_name(x->dtype)));
}

}  // namespace

NormResult run_rows(RowOp op, const Handle& x_in, const Handle& weight, const Handle& bias,
                    double eps, std::optional<DType> y_dtype, const Handle& residual_in) {
  const char* name = row_op_name(op);
  Backend& be = backend_of(x_in->device);
  const DType operand[] = {x_in->dtype};
  if (!be.supports(BackendOp::rows, operand)) {
    throw DTypeError(fmt::format("{}: {} has no {} {}", name, x_in->device.str(),
                                 dtype_name(x_in->dtype), name));
  }
  // (x + residual: both contiguous, as the backend reads them then.)
  const Handle x =
      (residual_in ? is_contiguous(x_in) : row_view(*x_in).has_value()) ? x_in : contiguous(x_in);
  const Handle residual =
      residual_in && !is_contiguous(residual_in) ? contiguous(residual_in) : residual_in;
  const bool norm = row_op_normalises(op);
  const Dims row_shape(x->shape.begin(), x->shape.end() - 1);
  NormResult r;
  const bool reduces = row_op_reduces(op);  // logsumexp: one f32 per row
  r.y = allocate(name, be, reduces ? row_shape : x->shape,
                 reduces ? DType::f32 : y_dtype.value_or(x->dtype));
  if (norm) {
    if (op == RowOp::layer_norm) r.mean = allocate(name, be, row_shape, DType::f32);
    r.rstd = allocate(name, be, row_shape, DType::f32);
  }
  if (residual) r.sum = allocate(name, be, x->shape, x->dtype);
  if (x->numel() == 0) return r;
  const Handle w = dense(weight), b = dense(bias);
  RowParams params{w.get(), b.get(), norm ? eps : 0.0, residual.get()};
  RowStats stats;
  if (r.mean) stats.mean.emplace(*r.mean);
  if (r.rstd) stats.rstd.emplace(*r.rstd);
  if (r.sum) stats.sum.emplace(*r.sum);
  be.rows(op, *x, params, Out(*r.y), stats);
  return r;
}

namespace {

// The residual beside x (after autocast): x's device and shape, x's dtype or a half type for an
// f32 x.
void check_residual(const char* op, const Handle& r, const Handle& x) {
  common_device(op, {&x, &r});
  if (r->shape != x->shape) {
    throw ShapeError(fmt::format("{}: residual {} must have x's shape {}", op,
                                 format_dims(r->shape), format_dims(x->shape)));
  }
  if (r->dtype != x->dtype && !(x->dtype == DType::f32 && is_half(r->dtype))) {
    throw DTypeError(
        fmt::format("{}: residual is {} but x is {}: x's dtype, or bf16 or f16 for an "
                    "f32 x",
                    op, dtype_name(r->dtype), dtype_name(x->dtype)));
  }
}

// Every norm's front end, `name` the op's public name: the norms are on autocast's f32 list, so
// under a guard x, weight and bias are cast up to f32 when half (the statistics, the result unless
// y_dtype asks for a half type, and weight's gradient are f32); the residual, where there is one,
// stays as it is. weight, bias and residual may be null.
NormResult checked_norm(const char* name, RowOp op, const Handle& x_in, const Handle& residual,
                        const Handle& weight_in, const Handle& bias_in, double eps,
                        std::optional<DType> y_dtype) {
  const Handle x = autocast_f32(x_in);
  const Handle weight = weight_in ? autocast_f32(weight_in) : weight_in;
  const Handle bias = bias_in ? autocast_f32(bias_in) : bias_in;
  check_input(name, x, eps);
  if (residual) check_residual(name, residual, x);
  check_affine(name, "weight", weight, x);
  check_affine(name, "bias", bias, x);
  check_y_dtype(name, x, y_dtype);
  return run_rows(op, x, weight, bias, eps, y_dtype, residual);
}

}  // namespace

NormResult layer_norm(const Handle& x, const Handle& weight, const Handle& bias, double eps,
                      std::optional<DType> y_dtype) {
  return checked_norm("layer_norm", RowOp::layer_norm, x, Handle{}, weight, bias, eps, y_dtype);
}

NormResult rms_norm(const Handle& x, const Handle& weight, double eps,
                    std::optional<DType> y_dtype) {
  return checked_norm("rms_norm", RowOp::rms_norm, x, Handle{}, weight, Handle{}, eps, y_dtype);
}

NormResult add_layer_norm(const Handle& x, const Handle& residual, const Handle& weight,
                          const Handle& bias, double eps, std::optional<DType> y_dtype) {
  return checked_norm("add_layer_norm", RowOp::layer_norm, x, residual, weight, bias, eps, y_dtype);
}

NormResult add_rms_norm(const Handle& x, const Handle& residual, const Handle& weight, double eps,
                        std::optional<DType> y_dtype) {
  return checked_norm("add_rms_norm", RowOp::rms_norm, x, residual, weight, Handle{}, eps, y_dtype);
}

}  // namespace kiln::detail
