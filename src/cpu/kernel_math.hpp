// What each element-wise op computes on one 32-bit lane, shared by both kernel tables.
//
// scalar_kernels.cpp is these functions in loops. The SIMD kernels (simd_unary.cpp,
// simd_binary.cpp) compute the same results with Highway vectors and fall back to these
// functions, lane by lane, for a vector that holds an argument outside the range where its SIMD
// routine is accurate (docs/accuracy.md). Keeping the edge cases (NaN, signed zeros,
// saturation, wrap-around) here makes the tables agree.
//
// The check_* functions reject (op, dtype) combinations that no kernel implements; both tables
// call them first, so the error messages are the same whichever table runs.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "ir/program.hpp"
#include "kiln/dtype.hpp"
#include "kiln/error.hpp"

namespace kiln::cpu {

// The op's name in messages.
inline const char* kernel_op_name(ir::Op op) { return ir::op_name(op); }

inline bool kernel_is_comparison(ir::Op op) {
  switch (op) {
    case ir::Op::eq:
    case ir::Op::ne:
    case ir::Op::lt:
    case ir::Op::le:
    case ir::Op::gt:
    case ir::Op::ge:
      return true;
    default:
      return false;
  }
}

namespace detail {

[[noreturn]] inline void throw_unsupported(ir::Op op, DType t) {
  throw DTypeError(std::string(kernel_op_name(op)) + ": no CPU kernel for dtype " + dtype_name(t));
}

inline bool valid_dtype(DType t) {
  return t == DType::f32 || t == DType::i32 || t == DType::boolean;
}

}  // namespace detail

// Throws unless unary(op, in, out_t) is implemented: neg/abs/relu on f32 and i32, the
// transcendental ops on f32, cast between any two dtypes.
inline void check_unary(ir::Op op, DType in, DType out_t) {
  if (op == ir::Op::cast) {
    if (!detail::valid_dtype(in)) detail::throw_unsupported(op, in);
    if (!detail::valid_dtype(out_t)) detail::throw_unsupported(op, out_t);
    return;
  }
  // The list's rule says which dtypes each op computes in (kiln/detail/op_list.hpp).
  const auto rule = ir::op_rule(op);
  if (ir::arity(op) != 1 || !rule) {
    throw InternalError(std::string("unary kernel: ") + kernel_op_name(op) + " is not a unary op");
  }
  if (in != DType::f32 && (*rule == kiln::detail::OpRule::floating || in != DType::i32)) {
    detail::throw_unsupported(op, in);
  }
  if (out_t != in) {
    throw DTypeError(std::string(kernel_op_name(op)) + ": result dtype " + dtype_name(out_t) +
                     " differs from operand dtype " + dtype_name(in));
  }
}

// Throws unless binary(op, in) is implemented: arithmetic on f32 and i32 (div and pow f32
// only), comparisons on all three dtypes (bool compares as the integers 0 and 1).
inline void check_binary(ir::Op op, DType in) {
  switch (op) {
    case ir::Op::add:
    case ir::Op::sub:
    case ir::Op::mul:
    case ir::Op::minimum:
    case ir::Op::maximum:
      if (in != DType::f32 && in != DType::i32) detail::throw_unsupported(op, in);
      return;
    case ir::Op::div:
    case ir::Op::pow:
      if (in != DType::f32) detail::throw_unsupported(op, in);
      return;
    case ir::Op::eq:
    case ir::Op::ne:
    case ir::Op::lt:
    case ir::Op::le:
    case ir::Op::gt:
    case ir::Op::ge:
      if (!detail::valid_dtype(in)) detail::throw_unsupported(op, in);
      return;
    default:
      throw InternalError(std::string("binary kernel: ") + kernel_op_name(op) +
                          " is not a binary op");
  }
}

inline void check_where(DType t) {
  if (!detail::valid_dtype(t)) detail::throw_unsupported(ir::Op::where, t);
}

// One lane of each op. Integer arithmetic goes through uint32_t so that it wraps without
// undefined behaviour (the conversion back to int32_t is modular since C++20).
namespace math {

inline std::int32_t wrap(std::uint32_t x) { return static_cast<std::int32_t>(x); }
inline std::uint32_t bits(std::int32_t x) { return static_cast<std::uint32_t>(x); }

inline std::int32_t neg(std::int32_t x) { return wrap(0u - bits(x)); }
inline std::int32_t abs(std::int32_t x) { return x < 0 ? neg(x) : x; }  // abs(INT_MIN) == INT_MIN
inline std::int32_t relu(std::int32_t x) { return x < 0 ? 0 : x; }
inline std::int32_t add(std::int32_t a, std::int32_t b) { return wrap(bits(a) + bits(b)); }
inline std::int32_t sub(std::int32_t a, std::int32_t b) { return wrap(bits(a) - bits(b)); }
inline std::int32_t mul(std::int32_t a, std::int32_t b) { return wrap(bits(a) * bits(b)); }

// relu(NaN) is NaN (as PyTorch); relu(-0) is +0.
inline float relu(float x) { return x <= 0.0f ? 0.0f : x; }

// glibc's float functions are within 1 ULP of the exact result (docs/accuracy.md).
inline float sin(float x) { return std::sin(x); }
inline float cos(float x) { return std::cos(x); }
inline float tan(float x) { return std::tan(x); }
inline float exp(float x) { return std::exp(x); }
inline float log(float x) { return std::log(x); }
inline float tanh(float x) { return std::tanh(x); }
// pow(x, +-0) = 1 and pow(1, y) = 1 even for NaN, signalling NaNs included (glibc's powf
// returns NaN for a signalling one); otherwise std::pow.
inline float pow(float x, float y) {
  if (y == 0.0f || x == 1.0f) return 1.0f;
  return std::pow(x, y);
}

// In double, so that the one rounding to float is the only error that matters.
inline float rsqrt(float x) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(x))); }

// 1 / (1 + exp(-x)) in double: exp(-x) cannot overflow for a float x, and for very negative x
// the result (about exp(x)) keeps its relative accuracy down to float's smallest subnormal.
inline float sigmoid(float x) {
  return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
}

// Below this, gelu(x) = x * Phi(x) is smaller than half the smallest float subnormal.
constexpr float kGeluZeroBelow = -15.0f;

// Exact GELU, x * Phi(x) = 0.5 * x * erfc(-x / sqrt(2)), as PyTorch's default. erfc keeps the
// relative accuracy for x < 0, where 1 + erf(x / sqrt(2)) would cancel. The limit at -inf is
// -0 (the formula itself would give -inf * 0 = NaN).
inline float gelu(float x) {
  if (x < kGeluZeroBelow) return -0.0f;
  const double xd = x;
  return static_cast<float>(0.5 * xd * std::erfc(-xd * 0.70710678118654752440));
}

// x / (1 + exp(-x)) in double, rounded once (sigmoid's reasoning); -inf gives NaN, as PyTorch's.
inline float silu(float x) {
  const double xd = x;
  return static_cast<float>(xd / (1.0 + std::exp(-xd)));
}

// erf in double, rounded once: the correctly rounded float in all but rare cases.
inline float erf(float x) { return static_cast<float>(std::erf(static_cast<double>(x))); }

// NumPy's minimum/maximum: NaN if either operand is NaN. Signed zeros are ordered
// -0 < +0 (IEEE 754-2019 minimum/maximum), so the result does not depend on operand order.
inline float minimum(float a, float b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}
inline float maximum(float a, float b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

// Truncation toward zero, saturating at the int32 limits; NaN becomes 0.
inline std::int32_t f32_to_i32(float x) {
  if (std::isnan(x)) return 0;
  if (x >= 2147483648.0f) return std::numeric_limits<std::int32_t>::max();
  if (x < -2147483648.0f) return std::numeric_limits<std::int32_t>::min();
  return static_cast<std::int32_t>(x);
}

}  // namespace math
}  // namespace kiln::cpu
