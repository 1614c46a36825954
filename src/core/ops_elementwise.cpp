// Element-wise ops: type promotion, scalar handling and one IR program per op.
//
// Promotion follows PyTorch: bool < i32 < f32; float-valued ops (sin, exp, /, pow, ...) give
// f32; an integral C++ scalar keeps an i32 tensor i32, a floating one promotes it to f32.
// Arithmetic on bool computes in i32 (so true + true == 2).
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

ir::Op ir_op(Unary op) {
  constexpr ir::Op table[] = {ir::Op::neg,   ir::Op::abs,  ir::Op::sin,     ir::Op::cos,
                              ir::Op::tan,   ir::Op::exp,  ir::Op::log,     ir::Op::sqrt,
                              ir::Op::rsqrt, ir::Op::tanh, ir::Op::sigmoid, ir::Op::relu,
                              ir::Op::gelu};
  return table[static_cast<int>(op)];
}

ir::Op ir_op(Binary op) {
  constexpr ir::Op table[] = {ir::Op::add,     ir::Op::sub,     ir::Op::mul, ir::Op::div,
                              ir::Op::minimum, ir::Op::maximum, ir::Op::eq,  ir::Op::ne,
                              ir::Op::lt,      ir::Op::le,      ir::Op::gt,  ir::Op::ge};
  return table[static_cast<int>(op)];
}

bool integer_ok(Unary op) { return op == Unary::neg || op == Unary::abs || op == Unary::relu; }

// The dtype a binary op computes in, given its operands' dtypes.
DType compute_dtype(Binary op, DType a, DType b) {
  if (op == Binary::div) return DType::f32;
  DType t = promote(a, b);
  return t == DType::boolean ? DType::i32 : t;
}

// The dtype a scalar takes beside a tensor of dtype t.
DType scalar_dtype(Scalar s, DType t) {
  if (!s.integral) return DType::f32;
  return t == DType::boolean ? DType::i32 : t;
}

double checked_scalar(const char* op, Scalar s, DType t) {
  if (t == DType::i32 && (s.value < std::numeric_limits<std::int32_t>::min() ||
                          s.value > std::numeric_limits<std::int32_t>::max())) {
    throw ValueError(fmt::format("{}: scalar {} does not fit i32", op, s.value));
  }
  return s.value;
}

const char* name(Binary op) {
  constexpr const char* names[] = {"add", "sub", "mul", "div", "minimum", "maximum",
                                   "eq",  "ne",  "lt",  "le",  "gt",      "ge"};
  return names[static_cast<int>(op)];
}

// One binary op over two operand nodes already in the program; casts both to the compute dtype.
Handle binary_program(Binary op, ir::Program& p, std::int32_t a, std::int32_t b,
                      std::span<const Handle> inputs, std::span<const double> scalars,
                      const Dims& shape, Device device) {
  DType t = compute_dtype(op, p.dtype(a), p.dtype(b));
  p.output(p.binary(ir_op(op), p.cast(a, t), p.cast(b, t)));
  return run_elementwise1(p, inputs, scalars, shape, device);
}

}  // namespace

Handle unary(Unary op, const Handle& x) {
  ir::Program p;
  std::int32_t in = p.input(x->dtype);
  DType t = integer_ok(op) ? (x->dtype == DType::boolean ? DType::i32 : x->dtype) : DType::f32;
  p.output(p.unary(ir_op(op), p.cast(in, t)));
  return run_elementwise1(p, std::span<const Handle>(&x, 1), {}, x->shape, x->device);
}

Handle binary(Binary op, const Handle& a, const Handle& b) {
  Device d = common_device(name(op), {&a, &b});
  Dims shape = broadcast_shapes(name(op), a->shape, b->shape);
  ir::Program p;
  std::int32_t x = p.input(a->dtype), y = p.input(b->dtype);
  Handle inputs[] = {a, b};
  return binary_program(op, p, x, y, inputs, {}, shape, d);
}

namespace {

// t op s (scalar_first: s op t), the scalar a parameter of the program.
Handle binary_scalar(Binary op, const Handle& t, Scalar s, bool scalar_first) {
  ir::Program p;
  DType st = scalar_dtype(s, t->dtype);
  std::int32_t x = p.input(t->dtype), y = p.scalar(st);
  double v = checked_scalar(name(op), s, st);
  if (scalar_first) std::swap(x, y);
  return binary_program(op, p, x, y, std::span<const Handle>(&t, 1), std::span<const double>(&v, 1),
                        t->shape, t->device);
}

}  // namespace

Handle binary(Binary op, const Handle& a, Scalar b) { return binary_scalar(op, a, b, false); }

Handle binary(Binary op, Scalar a, const Handle& b) { return binary_scalar(op, b, a, true); }

Handle pow(const Handle& x, double exponent) {
  ir::Program p;
  std::int32_t in = p.cast(p.input(x->dtype), DType::f32);
  p.output(p.binary(ir::Op::pow, in, p.scalar(DType::f32)));
  return run_elementwise1(p, std::span<const Handle>(&x, 1), std::span<const double>(&exponent, 1),
                          x->shape, x->device);
}

Handle clamp(const Handle& x, Scalar lo, Scalar hi) {
  // min(max(x, lo), hi), as NumPy's clip and PyTorch's clamp: NaN stays NaN; lo > hi gives hi.
  DType t = promote(scalar_dtype(lo, x->dtype), scalar_dtype(hi, x->dtype));
  t = promote(t, x->dtype == DType::boolean ? DType::i32 : x->dtype);
  ir::Program p;
  std::int32_t in = p.cast(p.input(x->dtype), t);
  std::int32_t low = p.binary(ir::Op::maximum, in, p.scalar(t));
  p.output(p.binary(ir::Op::minimum, low, p.scalar(t)));
  double scalars[] = {checked_scalar("clamp", lo, t), checked_scalar("clamp", hi, t)};
  return run_elementwise1(p, std::span<const Handle>(&x, 1), scalars, x->shape, x->device);
}

Handle where(const Handle& cond, const Handle& a, const Handle& b) {
  Device d = common_device("where", {&cond, &a, &b});
  if (cond->dtype != DType::boolean) {
    throw DTypeError(fmt::format("where: condition must be bool, got {}", dtype_name(cond->dtype)));
  }
  Dims shape =
      broadcast_shapes("where", broadcast_shapes("where", cond->shape, a->shape), b->shape);
  DType t = promote(a->dtype, b->dtype);
  ir::Program p;
  std::int32_t c = p.input(DType::boolean);
  std::int32_t x = p.cast(p.input(a->dtype), t), y = p.cast(p.input(b->dtype), t);
  p.output(p.where(c, x, y));
  Handle inputs[] = {cond, a, b};
  return run_elementwise1(p, inputs, {}, shape, d);
}

Handle cast(const Handle& x, DType to) {
  if (x->dtype == to) return x;
  ir::Program p;
  p.output(p.cast(p.input(x->dtype), to));
  return run_elementwise1(p, std::span<const Handle>(&x, 1), {}, x->shape, x->device);
}

}  // namespace kiln::detail
