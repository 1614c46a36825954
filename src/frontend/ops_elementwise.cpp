// Element-wise ops: type promotion, scalar handling and one IR program per op.
//
// Promotion follows PyTorch: bool < i32 < bf16, f16 < f32 (bf16 with f16 gives f32);
// float-valued ops (sin, exp, /, pow, ...) keep a floating dtype and give f32 for integers and
// bool; a C++ scalar takes the tensor's dtype unless it is floating beside an integer tensor,
// which gives f32. Arithmetic on bool computes in i32 (so true + true == 2). A half type's
// values are computed in f32 and rounded when stored.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>

#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

// The IR op of each front-end op (kiln/detail/op_list.hpp), by name.
ir::Op ir_op(Unary op) {
  switch (op) {
#define KILN_CASE(name, rule) \
  case Unary::name:           \
    return ir::Op::name;
    KILN_UNARY_OPS(KILN_CASE)
#undef KILN_CASE
  }
  throw InternalError("ir_op: not a unary op");
}

ir::Op ir_op(Binary op) {
  switch (op) {
#define KILN_CASE(name, rule) \
  case Binary::name:          \
    return ir::Op::name;
    KILN_BINARY_OPS(KILN_CASE)
#undef KILN_CASE
  }
  throw InternalError("ir_op: not a binary op");
}

// Each op's dtype rule, the IR's (every front-end op has one).
template <class FrontOp>
OpRule rule(FrontOp op) {
  return *ir::op_rule(ir_op(op));
}

// The dtype a binary op computes in, given its operands' dtypes.
DType binary_dtype(Binary op, DType a, DType b) {
  const DType t = promote(a, b);
  if (rule(op) == OpRule::real) return is_floating(t) ? t : DType::f32;
  return t == DType::boolean ? DType::i32 : t;
}

// The dtype a scalar takes beside a tensor of dtype t.
DType scalar_dtype(Scalar s, DType t) {
  if (!s.integral) return is_floating(t) ? t : DType::f32;
  return t == DType::boolean ? DType::i32 : t;
}

const char* name(Binary op) { return ir::op_name(ir_op(op)); }

// The programs of unary and binary ops depend only on the op, the operands' dtypes and (for a
// scalar operand) its side, so each is built once, at first use. Recording an op under fusion
// costs about as much as building one, so this halves it.
#define KILN_COUNT(name, rule) +1
constexpr int kUnaryOps = 0 KILN_UNARY_OPS(KILN_COUNT);
constexpr int kBinaryOps = 0 KILN_BINARY_OPS(KILN_COUNT);
#undef KILN_COUNT
constexpr int kDTypes = kNumDTypes;
int index(DType t) { return static_cast<int>(t); }
DType dtype_at(int i) { return static_cast<DType>(i); }

ir::Program build_unary(Unary op, DType x) {
  ir::Program p;
  std::int32_t in = p.input(x);
  const bool numeric = rule(op) == OpRule::numeric;
  DType t = numeric ? (x == DType::boolean ? DType::i32 : x) : is_floating(x) ? x : DType::f32;
  p.output(p.unary(ir_op(op), p.cast(in, t)));
  return p;
}

// One binary op over operands of dtypes a and b; an operand is a scalar slot where said.
ir::Program build_binary(Binary op, DType a, bool a_scalar, DType b, bool b_scalar) {
  ir::Program p;
  std::int32_t x = a_scalar ? p.scalar(a) : p.input(a);
  std::int32_t y = b_scalar ? p.scalar(b) : p.input(b);
  DType t = binary_dtype(op, a, b);
  p.output(p.binary(ir_op(op), p.cast(x, t), p.cast(y, t)));
  return p;
}

const ir::Program& unary_program(Unary op, DType x) {
  static const auto table = [] {
    std::array<std::array<ir::Program, kDTypes>, kUnaryOps> t;
    for (int o = 0; o < kUnaryOps; ++o)
      for (int d = 0; d < kDTypes; ++d) t[o][d] = build_unary(static_cast<Unary>(o), dtype_at(d));
    return t;
  }();
  return table[static_cast<int>(op)][index(x)];
}

const ir::Program& binary_program(Binary op, DType a, DType b) {
  static const auto table = [] {
    std::array<std::array<std::array<ir::Program, kDTypes>, kDTypes>, kBinaryOps> t;
    for (int o = 0; o < kBinaryOps; ++o)
      for (int i = 0; i < kDTypes; ++i)
        for (int j = 0; j < kDTypes; ++j)
          t[o][i][j] = build_binary(static_cast<Binary>(o), dtype_at(i), false, dtype_at(j), false);
    return t;
  }();
  return table[static_cast<int>(op)][index(a)][index(b)];
}

// tensor op scalar (scalar_first: scalar op tensor), by the tensor's and the scalar's dtypes.
const ir::Program& binary_scalar_program(Binary op, DType tensor, DType scalar, bool scalar_first) {
  static const auto table = [] {
    std::array<std::array<std::array<std::array<ir::Program, 2>, kDTypes>, kDTypes>, kBinaryOps> t;
    for (int o = 0; o < kBinaryOps; ++o)
      for (int i = 0; i < kDTypes; ++i)
        for (int j = 0; j < kDTypes; ++j) {
          const auto b = static_cast<Binary>(o);
          t[o][i][j][0] = build_binary(b, dtype_at(i), false, dtype_at(j), true);
          t[o][i][j][1] = build_binary(b, dtype_at(j), true, dtype_at(i), false);
        }
    return t;
  }();
  return table[static_cast<int>(op)][index(tensor)][index(scalar)][scalar_first ? 1 : 0];
}

}  // namespace

Handle unary(Unary op, const Handle& x_in) {
  const Handle x = autocast_to_f32(op) ? autocast_f32(x_in) : x_in;
  return run_elementwise1(ir::op_name(ir_op(op)), unary_program(op, x->dtype),
                          std::span<const Handle>(&x, 1), {}, x->shape, x->device);
}

Handle binary(Binary op, const Handle& a_in, const Handle& b_in) {
  const bool up = autocast_to_f32(op);
  const Handle a = up ? autocast_f32(a_in) : a_in, b = up ? autocast_f32(b_in) : b_in;
  Device d = common_device(name(op), {&a, &b});
  Dims shape = broadcast_shapes(name(op), a->shape, b->shape);
  Handle inputs[] = {a, b};
  return run_elementwise1(name(op), binary_program(op, a->dtype, b->dtype), inputs, {}, shape, d);
}

namespace {

// t op s (scalar_first: s op t), the scalar a parameter of the program.
Handle binary_scalar(Binary op, const Handle& t_in, Scalar s, bool scalar_first) {
  const Handle t = autocast_to_f32(op) ? autocast_f32(t_in) : t_in;
  DType st = scalar_dtype(s, t->dtype);
  double v = checked_scalar(name(op), s, st);
  return run_elementwise1(name(op), binary_scalar_program(op, t->dtype, st, scalar_first),
                          std::span<const Handle>(&t, 1), std::span<const double>(&v, 1), t->shape,
                          t->device);
}

}  // namespace

Handle binary(Binary op, const Handle& a, Scalar b) { return binary_scalar(op, a, b, false); }

Handle binary(Binary op, Scalar a, const Handle& b) { return binary_scalar(op, b, a, true); }

Handle pow(const Handle& x_in, double exponent) {
  const Handle x = autocast_f32(x_in);  // pow is on autocast's f32 list
  const DType t = is_floating(x->dtype) ? x->dtype : DType::f32;
  ir::Program p;
  std::int32_t in = p.cast(p.input(x->dtype), t);
  p.output(p.binary(ir::Op::pow, in, p.scalar(t)));
  return run_elementwise1("pow", p, std::span<const Handle>(&x, 1),
                          std::span<const double>(&exponent, 1), x->shape, x->device);
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
  return run_elementwise1("clamp", p, std::span<const Handle>(&x, 1), scalars, x->shape, x->device);
}

Handle cast(const Handle& x, DType to) {
  if (x->dtype == to) return x;
  ir::Program p;
  p.output(p.cast(p.input(x->dtype), to));
  return run_elementwise1("cast", p, std::span<const Handle>(&x, 1), {}, x->shape, x->device);
}

}  // namespace kiln::detail
