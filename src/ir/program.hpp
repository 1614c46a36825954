// The element-wise IR: the one place that says what each element-wise op means.
//
// A Program is a DAG of nodes in topological order. Leaves read an input tensor, a scalar
// parameter or the element's linear index; every other node applies one op to earlier
// nodes. Operands of a node already have the dtype the op computes in (the builder inserts
// casts), so a code generator never promotes types itself. Scalars are parameters whose values
// are passed at run time, so `x * 0.5` and `x * 0.7` are the same program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "kiln/detail/op_list.hpp"
#include "kiln/dtype.hpp"

namespace kiln::ir {

// Leaves, then the unary ops and cast, then the binary ops (both from kiln/detail/op_list.hpp,
// which says each one's dtype rule), then where.
#define KILN_IR_OP(name, rule) name,
enum class Op : std::uint8_t {
  input,                       // a = input slot
  scalar,                      // a = scalar slot
  index,                       // the output element's linear (row-major) index, as i32
  KILN_UNARY_OPS(KILN_IR_OP)   // (a)
  cast,                        // (a): operand dtype -> node dtype
  KILN_BINARY_OPS(KILN_IR_OP)  // (a, b): operands have the node's dtype, comparisons' node bool
  where,                       // (a bool; b, c the node's dtype)
};
#undef KILN_IR_OP

inline constexpr const char* kOpNames[] = {
#define KILN_IR_OP_NAME(name, rule) #name,
    "input", "scalar", "index", KILN_UNARY_OPS(KILN_IR_OP_NAME) "cast",
    KILN_BINARY_OPS(KILN_IR_OP_NAME) "where"
#undef KILN_IR_OP_NAME
};
static_assert(std::size(kOpNames) == static_cast<std::size_t>(Op::where) + 1);

// The op's name ("sin", "where"), as kernels and messages spell it.
constexpr const char* op_name(Op op) { return kOpNames[static_cast<int>(op)]; }
// 0 for leaves.
constexpr int arity(Op op) {
  if (op <= Op::index) return 0;
  if (op <= Op::cast) return 1;
  return op < Op::where ? 2 : 3;
}
// The dtype rule of a unary or binary op of the list; leaves, cast and where have none.
constexpr std::optional<detail::OpRule> op_rule(Op op) {
  switch (op) {
#define KILN_IR_RULE(name, rule) \
  case Op::name:                 \
    return detail::OpRule::rule;
    KILN_UNARY_OPS(KILN_IR_RULE)
    KILN_BINARY_OPS(KILN_IR_RULE)
#undef KILN_IR_RULE
    default:
      return std::nullopt;
  }
}
constexpr bool is_comparison(Op op) { return op_rule(op) == detail::OpRule::comparison; }

// The `case` labels of every op that is not one of the list's unary ops (the leaves, cast, the
// binary ops, where). A switch over the unary ops names these for its error branch instead of
// a default, so a unary op added to the list without a case there fails the build (-Wswitch).
#define KILN_IR_CASE_LABEL(name, rule) case ::kiln::ir::Op::name:
#define KILN_IR_NOT_UNARY_CASES \
  case ::kiln::ir::Op::input:   \
  case ::kiln::ir::Op::scalar:  \
  case ::kiln::ir::Op::index:   \
  case ::kiln::ir::Op::cast:    \
  case ::kiln::ir::Op::where:   \
    KILN_BINARY_OPS(KILN_IR_CASE_LABEL)

struct Node {
  Op op;
  DType dtype;  // the dtype this node produces
  std::int32_t a = -1, b = -1, c = -1;

  bool operator==(const Node&) const = default;
};

struct Program {
  std::vector<DType> inputs;          // dtype of each input slot
  std::vector<DType> scalars;         // dtype of each scalar slot
  std::vector<Node> nodes;            // topological order
  std::vector<std::int32_t> outputs;  // node ids, one per output tensor

  std::int32_t input(DType t);
  std::int32_t scalar(DType t);
  std::int32_t index();
  // Appends op over operands, inferring the node dtype (casts are not inserted here).
  std::int32_t unary(Op op, std::int32_t a);
  std::int32_t cast(std::int32_t a, DType to);
  std::int32_t binary(Op op, std::int32_t a, std::int32_t b);
  std::int32_t where(std::int32_t cond, std::int32_t a, std::int32_t b);
  void output(std::int32_t node) { outputs.push_back(node); }

  DType dtype(std::int32_t node) const { return nodes[node].dtype; }
  // Structure only (ops, dtypes, wiring): two programs are the same kernel exactly when they
  // compare equal, and equal programs have equal hashes. Caches of compiled kernels and fusion
  // plans key on these; both run on every launch, so neither allocates.
  bool operator==(const Program&) const = default;
  std::uint64_t structure_hash() const;
};

// A readable listing, one node per line ("%3 = mul f32 %1 %2"), for traces and test failures.
std::string describe(const Program& p);

}  // namespace kiln::ir
