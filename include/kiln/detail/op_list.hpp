// kiln's element-wise ops, listed once. Everything that enumerates them expands these lists: the
// front end's enums (Unary, Binary) and Tensor's methods, the IR's Op enum and names
// (src/ir/program.hpp), the dtype rules. Each code generator spells every op in a switch
// without a default, so an op missing there is a compile error (-Wswitch), not a run-time one.
// docs/architecture.md, "Adding an element-wise op", lists the rest of the checklist.
#pragma once

// KILN_UNARY_OPS(X) expands X(name, rule) for every unary op, where rule is
//   numeric:  f32 and i32 (bool computes as i32); the result keeps that dtype
//   floating: computes in f32 (integers and bool are cast first); the result is f32
#define KILN_UNARY_OPS(X)                                         \
  X(neg, numeric)                                                 \
  X(abs, numeric)                                                 \
  X(relu, numeric)                                                \
  X(sin, floating)                                                \
  X(cos, floating)                                                \
  X(tan, floating)                                                \
  X(exp, floating)                                                \
  X(log, floating)                                                \
  X(sqrt, floating)                                               \
  X(rsqrt, floating)                                              \
  X(tanh, floating)                                               \
  X(sigmoid, floating)                                            \
  X(gelu, floating) /* exact: x * Phi(x), as PyTorch's default */ \
  X(silu, floating) /* x * sigmoid(x) */                          \
  X(erf, floating)

// KILN_BINARY_OPS(X) expands X(name, rule) for every binary op, where rule is
//   arithmetic: operands promoted (bool < i32 < f32; bool computes as i32), result that dtype
//   real:       computes in f32 whatever the operands
//   comparison: operands promoted, result bool
#define KILN_BINARY_OPS(X)                                \
  X(add, arithmetic)                                      \
  X(sub, arithmetic)                                      \
  X(mul, arithmetic) /* i32 wraps */                      \
  X(div, real)                                            \
  X(pow, real)                                            \
  X(minimum, arithmetic) /* NaN propagates, as NumPy's */ \
  X(maximum, arithmetic)                                  \
  X(eq, comparison)                                       \
  X(ne, comparison)                                       \
  X(lt, comparison)                                       \
  X(le, comparison)                                       \
  X(gt, comparison)                                       \
  X(ge, comparison)

namespace kiln::detail {

enum class OpRule : unsigned char { numeric, floating, arithmetic, real, comparison };

}  // namespace kiln::detail
