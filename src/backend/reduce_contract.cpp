// The contract of Backend::reduce, checked by every backend before it picks a kernel: the front
// end has checked already, but a direct backend call must get the same errors, not a wrong
// kernel.
#include <limits>
#include <string>

#include "backend/backend.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {

void check_reduce_call(ReduceOp op, const TensorImpl& x, int dim, const TensorImpl& out) {
  const std::string name = detail::reduce_name(op);
  const std::string where = "x " + format_dims(x.shape) +
                            (dim >= 0 ? ", dim " + std::to_string(dim) : std::string(", all"));
  if (dim >= x.rank()) throw IndexError(name + ": no dim " + std::to_string(dim) + " in " + where);
  Dims want = x.shape;
  if (dim >= 0) {
    want[dim] = 1;
  } else {
    want.assign(want.size(), 1);
  }
  if (out.shape != want || !out.is_contiguous()) {
    throw ShapeError(name + ": output " + format_dims(out.shape) + " for " + where +
                     " (expected a contiguous " + format_dims(want) + ")");
  }
  const DType result = detail::reduce_result_dtype(op, x.dtype);
  if (out.dtype != result) {
    throw DTypeError(name + " of " + dtype_name(x.dtype) + " writes " + dtype_name(result) +
                     ", but the output is " + dtype_name(out.dtype));
  }
  const std::int64_t len = dim >= 0 ? x.shape[dim] : x.numel();
  const bool has_identity = op == ReduceOp::sum || op == ReduceOp::mean;
  if (!has_identity && len == 0 && out.numel() > 0) {
    throw ValueError(name + ": empty reduction has no identity (" + where + ")");
  }
  if ((op == ReduceOp::argmax || op == ReduceOp::argmin) &&
      len - 1 > std::numeric_limits<std::int32_t>::max()) {
    throw ValueError(name + ": indices up to " + std::to_string(len - 1) + " do not fit in i32 (" +
                     where + ")");
  }
}

TensorImpl prologue_value(const Prologue& p) {
  if (p.program.outputs.size() != 1 || p.program.inputs.size() != p.inputs.size() ||
      p.program.scalars.size() != p.scalars.size()) {
    throw InternalError("reduce: a prologue needs one output and its program's inputs and scalars");
  }
  TensorImpl v;
  v.dtype = p.program.dtype(p.program.outputs[0]);
  v.shape = p.shape;
  v.strides = contiguous_strides(p.shape);
  return v;
}

void check_sum_of_squares_call(std::span<const TensorImpl* const> xs, const TensorImpl& total) {
  if (total.dtype != DType::f32 || total.numel() != 1 || !total.is_contiguous()) {
    throw ShapeError("sum_of_squares: total must be a contiguous f32 tensor of one element, got " +
                     std::string(dtype_name(total.dtype)) + " " + format_dims(total.shape));
  }
  for (const TensorImpl* x : xs) {
    if (!is_floating(x->dtype)) {
      throw DTypeError(std::string("sum_of_squares: every tensor must be f32, bf16 or f16, got ") +
                       dtype_name(x->dtype));
    }
    if (!x->is_contiguous()) throw ValueError("sum_of_squares: every tensor must be contiguous");
    if (x->buffer == total.buffer) throw ValueError("sum_of_squares: total is one of the tensors");
  }
}

void check_adamw_call(std::span<const AdamWTensors> params, const AdamWScalars& s) {
  const auto check = [](const TensorImpl& t, const Dims& shape, const char* what) {
    if (t.dtype != DType::f32)
      throw DTypeError(std::string("adamw: ") + what + " must be f32, got " + dtype_name(t.dtype));
    if (t.shape != shape) {
      throw ShapeError(std::string("adamw: ") + what + " " + format_dims(t.shape) +
                       " must have the parameter's shape " + format_dims(shape));
    }
    if (!t.is_contiguous()) throw ValueError(std::string("adamw: ") + what + " must be contiguous");
  };
  for (const AdamWTensors& p : params) {
    if (!p.param || !p.grad)
      throw ValueError("adamw: every parameter needs its tensor and gradient");
    if (!p.m != !p.v) throw ValueError("adamw: the moments m and v are both given or both absent");
    const Dims& shape = p.param->shape;
    check(*p.param, shape, "param");
    check(*p.grad, shape, "grad");
    if (p.m) check(*p.m, shape, "m");
    if (p.v) check(*p.v, shape, "v");
    check(*p.new_param, shape, "new_param");
    check(*p.new_m, shape, "new_m");
    check(*p.new_v, shape, "new_v");
  }
  if (s.clip && (s.clip->dtype != DType::f32 || s.clip->numel() != 1))
    throw ShapeError("adamw: clip must be one f32 element");
}

}  // namespace kiln::detail
