// Building element-wise programs and naming their structure.
#include "ir/program.hpp"

#include <fmt/format.h>

#include "core/hash.hpp"
#include "kiln/error.hpp"

namespace kiln::ir {

std::int32_t Program::input(DType t) {
  nodes.push_back({Op::input, t, static_cast<std::int32_t>(inputs.size())});
  inputs.push_back(t);
  return static_cast<std::int32_t>(nodes.size() - 1);
}

std::int32_t Program::scalar(DType t) {
  nodes.push_back({Op::scalar, t, static_cast<std::int32_t>(scalars.size())});
  scalars.push_back(t);
  return static_cast<std::int32_t>(nodes.size() - 1);
}

std::int32_t Program::index() {
  nodes.push_back({Op::index, DType::i32});
  return static_cast<std::int32_t>(nodes.size() - 1);
}

std::int32_t Program::unary(Op op, std::int32_t a) {
  nodes.push_back({op, dtype(a), a});
  return static_cast<std::int32_t>(nodes.size() - 1);
}

std::int32_t Program::cast(std::int32_t a, DType to) {
  if (dtype(a) == to) return a;
  // A half value cast to f32 and back is itself (f32 holds every half value): autocast's
  // gradients pass through such round trips, and a copy would be written for each.
  const Node& n = nodes[static_cast<std::size_t>(a)];
  if (n.op == Op::cast && n.dtype == DType::f32 && is_half(to) && dtype(n.a) == to) return n.a;
  nodes.push_back({Op::cast, to, a});
  return static_cast<std::int32_t>(nodes.size() - 1);
}

std::int32_t Program::binary(Op op, std::int32_t a, std::int32_t b) {
  if (dtype(a) != dtype(b)) {
    throw DTypeError(fmt::format("ir: {} operands differ: {} and {}", op_name(op),
                                 dtype_name(dtype(a)), dtype_name(dtype(b))));
  }
  nodes.push_back({op, is_comparison(op) ? DType::boolean : dtype(a), a, b});
  return static_cast<std::int32_t>(nodes.size() - 1);
}

std::int32_t Program::where(std::int32_t cond, std::int32_t a, std::int32_t b) {
  if (dtype(cond) != DType::boolean || dtype(a) != dtype(b)) {
    throw DTypeError(fmt::format("ir: where({}, {}, {}) needs a bool condition and equal branches",
                                 dtype_name(dtype(cond)), dtype_name(dtype(a)),
                                 dtype_name(dtype(b))));
  }
  nodes.push_back({Op::where, dtype(a), cond, a, b});
  return static_cast<std::int32_t>(nodes.size() - 1);
}

std::uint64_t Program::structure_hash() const {
  // FNV-1a over every field that equality compares.
  std::uint64_t h = detail::kFnvOffset;
  auto mix = [&h](std::uint64_t v) { detail::hash_mix(h, v); };
  auto id = [](std::int32_t v) {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(v));
  };
  for (DType t : inputs) mix(static_cast<std::uint64_t>(t));
  mix(0x100);
  for (DType t : scalars) mix(static_cast<std::uint64_t>(t));
  mix(0x200);
  for (const Node& n : nodes) {
    mix(static_cast<std::uint64_t>(n.op) << 8 | static_cast<std::uint64_t>(n.dtype));
    mix(id(n.a) << 32 | id(n.b));
    mix(id(n.c));
  }
  mix(0x300);
  for (std::int32_t o : outputs) mix(id(o));
  return h;
}

std::string describe(const Program& p) {
  std::string s;
  for (std::size_t n = 0; n < p.nodes.size(); ++n) {
    const Node& node = p.nodes[n];
    s += fmt::format("  %{} = {} {}", n, op_name(node.op), dtype_name(node.dtype));
    if (node.op == Op::input || node.op == Op::scalar) {
      s += fmt::format(" #{}", node.a);
    } else {
      for (std::int32_t operand : {node.a, node.b, node.c})
        if (operand >= 0) s += fmt::format(" %{}", operand);
    }
    s += "\n";
  }
  s += "  outputs:";
  for (auto o : p.outputs) s += fmt::format(" %{}", o);
  return s;
}

}  // namespace kiln::ir
