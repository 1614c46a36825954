// layer_norm and rms_norm over the last dim, composed from reductions and element-wise ops.
// A first piece of kiln issue 19: the public API, the checks and the saved statistics are the
// final ones; the single-pass row kernels (a Backend::rows call) are still to come and will
// replace the bodies of normalize() below without changing what callers see.
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
  if (x->shape.back() == 0 && x->numel() == 0 && x->shape.size() > 0) {
    // Rows of zero elements have no mean; an empty batch of rows is fine (handled below).
    bool rows_exist = true;
    for (std::size_t i = 0; i + 1 < x->shape.size(); ++i) rows_exist = rows_exist && x->shape[i];
    if (rows_exist) throw ValueError(fmt::format("{}: cannot normalise rows of 0 elements", op));
  }
}

// The per-row statistic s ([..., 1]) as a tensor of the row shape x.shape[:-1].
Handle drop_last(const Handle& s) { return squeeze(s, static_cast<int>(s->shape.size()) - 1); }

NormResult normalize(const char* op, const Handle& x, const Handle& weight, const Handle& bias,
                     double eps, bool rms) {
  check_input(op, x, eps);
  check_affine(op, "weight", weight, x);
  check_affine(op, "bias", bias, x);
  const int d = static_cast<int>(x->shape.size()) - 1;
  Handle xf = cast(x, DType::f32);
  Dims row_shape(x->shape.begin(), x->shape.end() - 1);
  if (xf->numel() == 0) {
    Handle none = full(row_shape, Scalar{0, false}, DType::f32, x->device);
    return {cast(xf, x->dtype), rms ? Handle{} : none, none};
  }
  // f32 throughout (as PyTorch for half inputs); the result is rounded once at the end.
  Handle mean, centred = xf;
  if (!rms) {
    mean = reduce(Reduction::mean, xf, d, true);
    centred = binary(Binary::sub, xf, mean);
  }
  Handle var = reduce(Reduction::mean, binary(Binary::mul, centred, centred), d, true);
  Handle rstd = unary(Unary::rsqrt, binary(Binary::add, var, Scalar{eps, false}));
  Handle y = binary(Binary::mul, centred, rstd);
  if (weight) y = binary(Binary::mul, y, cast(weight, DType::f32));
  if (bias) y = binary(Binary::add, y, cast(bias, DType::f32));
  if (is_half(x->dtype)) y = cast(y, x->dtype);
  return {y, mean ? drop_last(mean) : Handle{}, drop_last(rstd)};
}

}  // namespace

NormResult layer_norm(const Handle& x, const Handle& weight, const Handle& bias, double eps) {
  return normalize("layer_norm", x, weight, bias, eps, false);
}

NormResult rms_norm(const Handle& x, const Handle& weight, double eps) {
  return normalize("rms_norm", x, weight, Handle{}, eps, true);
}

}  // namespace kiln::detail
