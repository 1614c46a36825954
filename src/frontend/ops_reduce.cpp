// Reductions over one dim or over all elements; softmax and log_softmax (one Backend::rows call
// over the last dim, composed from reductions over the others).
#include <fmt/format.h>

#include <vector>

#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

bool needs_identity(Reduction op) { return op != Reduction::sum && op != Reduction::mean; }

// Reduces into a contiguous tensor of x's rank with the reduced dims set to 1.
Handle reduce_keep(Reduction op, const Handle& x, int dim) {
  const char* name = reduce_name(op);
  Dims out_shape = x->shape;
  if (dim >= 0)
    out_shape[dim] = 1;
  else
    out_shape.assign(out_shape.size(), 1);
  std::int64_t reduced = dim >= 0 ? x->shape[dim] : x->numel();
  if (needs_identity(op) && reduced == 0 && numel(out_shape) > 0) {
    throw ValueError(fmt::format("{}: cannot reduce over zero elements (shape {}, {})", name,
                                 format_dims(x->shape),
                                 dim >= 0 ? fmt::format("dim {}", dim) : "all"));
  }
  Backend& be = backend_of(x->device);
  Handle out = allocate(name, be, out_shape, reduce_result_dtype(op, x->dtype));
  if (out->numel() > 0) be.reduce(op, *x, dim, detail::Out(*out));
  return out;
}

// sum and mean are on autocast's f32 list (PyTorch's has sum; mean joins it here so that a loss
// written as a mean comes out f32 too); max, min and the arg- ones select, so they keep x's dtype.
Handle autocast_sum(Reduction op, const Handle& x) {
  return op == Reduction::sum || op == Reduction::mean ? autocast_f32(x) : x;
}

}  // namespace

Handle reduce(Reduction op, const Handle& x, int dim, bool keepdim) {
  Handle out = reduce_keep(op, autocast_sum(op, x), dim);
  if (keepdim) return out;
  Dims shape = out->shape, strides = out->strides;
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  return view(*out, shape, strides, out->offset);
}

Handle reduce_all(Reduction op, const Handle& x) {
  Handle out = reduce_keep(op, autocast_sum(op, x), -1);
  return view(*out, {}, {}, out->offset);
}

Handle sum_of_squares(std::span<const Handle> xs) {
  if (xs.empty()) throw ValueError("sum_of_squares: needs at least one tensor");
  const Device device = xs[0]->device;
  bool direct = !grad_enabled();  // the backend's call records no gradient
  std::vector<const TensorImpl*> views;
  for (const Handle& x : xs) {
    if (x->device != device) {
      throw DeviceError(
          fmt::format("sum_of_squares: tensors on {} and {}", device.str(), x->device.str()));
    }
    if (!is_floating(x->dtype)) {
      throw DTypeError(fmt::format("sum_of_squares: tensors must be f32, bf16 or f16, got {}",
                                   dtype_name(x->dtype)));
    }
    direct = direct && x->is_contiguous() && !requires_grad(x);
    views.push_back(x.get());
  }
  Backend& be = backend_of(device);
  if (direct) {
    Handle total = allocate("sum_of_squares", be, {}, DType::f32);
    if (be.sum_of_squares(views, detail::Out(*total))) return total;
  }
  // Added once every sum has run, in order: the adds then fuse, a group of them per kernel.
  std::vector<Handle> sums;
  for (const Handle& x : xs) {
    const Handle f = cast(x, DType::f32);
    sums.push_back(reduce_all(Reduction::sum, binary(Binary::mul, f, f)));
  }
  Handle total = sums[0];
  for (std::size_t i = 1; i < sums.size(); ++i) total = binary(Binary::add, total, sums[i]);
  return total;
}

namespace {

Handle softmax_f32(const Handle& x, int dim, bool log) {
  Handle xf = cast(x, DType::f32);
  if (xf->numel() == 0) return xf;
  // Shift by the max so exp never overflows; a row of -inf gives NaN, as PyTorch.
  Handle m = reduce(Reduction::max, xf, dim, true);
  if (!log) {
    // On a fused device the sum evaluates exp(x - m) in its kernel and leaves the group open,
    // so the division joins it: e is computed twice but never written.
    Handle e = unary(Unary::exp, binary(Binary::sub, xf, m));
    Handle s = reduce(Reduction::sum, e, dim, true);
    return binary(Binary::div, e, s);
  }
  // log(s) has another shape, so recording it closes the group: no handle to x - m may be
  // alive then, or it would be written. The subtraction is recomputed after it instead (one
  // more element-wise pass when fusion is off; the same values either way).
  Handle s = reduce(Reduction::sum, unary(Unary::exp, binary(Binary::sub, xf, m)), dim, true);
  Handle ls = unary(Unary::log, s);  // (the temporaries above are gone by now)
  return binary(Binary::sub, binary(Binary::sub, xf, m), ls);
}

}  // namespace

// Computed in f32 whatever x's dtype (as PyTorch); a half-type result is rounded once, at the end.
// Over the last dim: the row kernel (an integer x is cast to f32 first). Over another dim:
// composed.
// On autocast's f32 list: under a guard a half x is cast up first, so the result is f32.
Handle softmax(const Handle& x_in, int dim, bool log) {
  const Handle x = autocast_f32(x_in);
  if (dim == x->rank() - 1) {
    const Handle xf = is_floating(x->dtype) ? x : cast(x, DType::f32);
    return run_rows(log ? RowOp::log_softmax : RowOp::softmax, xf, Handle{}, Handle{}, 0.0).y;
  }
  Handle r = softmax_f32(x, dim, log);
  return is_half(x->dtype) ? cast(r, x->dtype) : r;
}

}  // namespace kiln::detail
