// Reverse mode over an element-wise program: one adjoint (f32) per forward node, rules per op.
#include "ir/derivative.hpp"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "kiln/error.hpp"

namespace kiln::ir {

bool differentiable(DType t) { return is_floating(t); }

namespace {

constexpr DType kF32 = DType::f32;

class Builder {
 public:
  Builder(const Program& f, Gradient& g) : f_(f), g_(g), p_(g.program), adj_(f.nodes.size(), -1) {
    // The forward nodes are copied as they are (same ids): the gradient reads them as primal
    // values, and the dead ones are dropped at the end.
    p_.inputs = f.inputs;
    p_.scalars = f.scalars;
    p_.nodes = f.nodes;
  }

  void seed(std::int32_t node, std::int32_t upstream) { push(node, p_.cast(upstream, kF32)); }

  // Walks the forward nodes from last to first, handing each adjoint to the operands.
  void run() {
    for (auto n = static_cast<std::int32_t>(f_.nodes.size()) - 1; n >= 0; --n)
      if (adj_[n] >= 0) back(n);
  }

  // The adjoint of forward input slot `slot` in its dtype (zero when nothing reads it).
  std::int32_t input_gradient(std::int32_t slot) {
    for (std::size_t n = 0; n < f_.nodes.size(); ++n) {
      const Node& node = f_.nodes[n];
      if (node.op == Op::input && node.a == slot && adj_[n] >= 0)
        return p_.cast(adj_[n], f_.inputs[slot]);
    }
    return p_.cast(k(0.0), f_.inputs[slot]);
  }

 private:
  // The f32 value of forward node n.
  std::int32_t v(std::int32_t n) { return p_.cast(n, kF32); }
  // An f32 constant, a scalar slot whose value the Gradient lists.
  std::int32_t k(double value) {
    for (auto [val, node] : constants_)
      if (val == value && std::signbit(val) == std::signbit(value)) return node;
    const std::int32_t node = p_.scalar(kF32);
    g_.constants.push_back(value);
    constants_.emplace_back(value, node);
    return node;
  }
  std::int32_t add(std::int32_t a, std::int32_t b) { return p_.binary(Op::add, a, b); }
  std::int32_t sub(std::int32_t a, std::int32_t b) { return p_.binary(Op::sub, a, b); }
  std::int32_t mul(std::int32_t a, std::int32_t b) { return p_.binary(Op::mul, a, b); }
  std::int32_t div(std::int32_t a, std::int32_t b) { return p_.binary(Op::div, a, b); }
  std::int32_t neg(std::int32_t a) { return p_.unary(Op::neg, a); }
  std::int32_t cmp(Op op, std::int32_t a, std::int32_t b) { return p_.binary(op, a, b); }
  std::int32_t where(std::int32_t c, std::int32_t a, std::int32_t b) { return p_.where(c, a, b); }

  // Adds `contribution` (f32) to node n's adjoint, if a gradient flows through n's dtype.
  void push(std::int32_t n, std::int32_t contribution) {
    if (!differentiable(f_.nodes[n].dtype)) return;
    adj_[n] = adj_[n] < 0 ? contribution : add(adj_[n], contribution);
  }

  void back(std::int32_t n) {
    const Node& node = f_.nodes[n];
    const std::int32_t g = adj_[n], a = node.a, b = node.b;
    switch (node.op) {
      case Op::input:
      case Op::scalar:
      case Op::index:
        return;
      case Op::neg:
        return push(a, neg(g));
      case Op::abs:
        return push(
            a, where(cmp(Op::gt, v(a), k(0)), g, where(cmp(Op::lt, v(a), k(0)), neg(g), k(0))));
      case Op::relu:
        return push(a, where(cmp(Op::gt, v(a), k(0)), g, k(0)));
      case Op::sin:
        return push(a, mul(g, p_.unary(Op::cos, v(a))));
      case Op::cos:
        return push(a, neg(mul(g, p_.unary(Op::sin, v(a)))));
      case Op::tan:
        return push(a, mul(g, add(k(1), mul(v(n), v(n)))));
      case Op::exp:
        return push(a, mul(g, v(n)));
      case Op::log:
        return push(a, div(g, v(a)));
      case Op::sqrt:
        return push(a, div(g, mul(k(2), v(n))));
      case Op::rsqrt:  // -x^(-3/2) / 2
        return push(a, mul(mul(g, k(-0.5)), mul(v(n), mul(v(n), v(n)))));
      case Op::tanh:
        return push(a, mul(g, sub(k(1), mul(v(n), v(n)))));
      case Op::sigmoid:
        return push(a, mul(g, mul(v(n), sub(k(1), v(n)))));
      case Op::gelu: {  // Phi(x) + x phi(x)
        const std::int32_t x = v(a);
        const std::int32_t cdf =
            mul(k(0.5), add(k(1), p_.unary(Op::erf, mul(x, k(std::numbers::sqrt2 / 2)))));
        const std::int32_t pdf = mul(k(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2),
                                     p_.unary(Op::exp, mul(k(-0.5), mul(x, x))));
        return push(a, mul(g, add(cdf, mul(x, pdf))));
      }
      case Op::silu: {  // s (1 + x (1 - s)), s = sigmoid(x)
        const std::int32_t s = p_.unary(Op::sigmoid, v(a));
        return push(a, mul(g, mul(s, add(k(1), mul(v(a), sub(k(1), s))))));
      }
      case Op::erf:
        return push(a, mul(g, mul(k(2 * std::numbers::inv_sqrtpi),
                                  p_.unary(Op::exp, neg(mul(v(a), v(a)))))));
      case Op::cast:
        return push(a, g);
      case Op::add:
        push(a, g);
        return push(b, g);
      case Op::sub:
        push(a, g);
        return push(b, neg(g));
      case Op::mul:
        push(a, mul(g, v(b)));
        return push(b, mul(g, v(a)));
      case Op::div:
        push(a, div(g, v(b)));
        return push(b, neg(div(mul(g, v(n)), v(b))));
      case Op::pow: {
        // d/dx: y x^(y-1), 0 where y == 0; d/dy: x^y log x, 0 where x == 0 and y >= 0.
        const std::int32_t x = v(a), y = v(b);
        const std::int32_t dx = mul(g, mul(y, p_.binary(Op::pow, x, sub(y, k(1)))));
        push(a, where(cmp(Op::eq, y, k(0)), k(0), dx));
        const std::int32_t dy = mul(g, mul(v(n), p_.unary(Op::log, x)));
        return push(b, where(cmp(Op::eq, x, k(0)), where(cmp(Op::ge, y, k(0)), k(0), dy), dy));
      }
      case Op::minimum:
      case Op::maximum: {
        // The selected operand takes the gradient; equal operands share it evenly.
        const Op wins = node.op == Op::minimum ? Op::lt : Op::gt;
        const std::int32_t half = where(cmp(Op::eq, v(a), v(b)), mul(g, k(0.5)), k(0));
        push(a, where(cmp(wins, v(a), v(b)), g, half));
        return push(b, where(cmp(wins, v(b), v(a)), g, half));
      }
      case Op::eq:
      case Op::ne:
      case Op::lt:
      case Op::le:
      case Op::gt:
      case Op::ge:
        return;  // bool: never reached (no adjoint), listed so that -Wswitch checks the list
      case Op::where:
        push(b, where(node.a, g, k(0)));
        return push(node.c, where(node.a, k(0), g));
    }
  }

  const Program& f_;
  Gradient& g_;
  Program& p_;
  std::vector<std::int32_t> adj_;
  std::vector<std::pair<double, std::int32_t>> constants_;
};

// Drops the nodes no output needs (the forward nodes the rules did not read); leaves that name
// input and scalar slots stay, so slots keep their numbers.
void drop_dead_nodes(Program& p) {
  std::vector<bool> live(p.nodes.size(), false);
  for (std::int32_t o : p.outputs) live[o] = true;
  for (auto n = static_cast<std::int32_t>(p.nodes.size()) - 1; n >= 0; --n) {
    const Node& node = p.nodes[n];
    if (node.op == Op::input || node.op == Op::scalar) live[n] = true;
    if (!live[n] || arity(node.op) == 0) continue;
    for (std::int32_t operand : {node.a, node.b, node.c})
      if (operand >= 0) live[operand] = true;
  }
  std::vector<std::int32_t> id(p.nodes.size(), -1);
  std::vector<Node> kept;
  for (std::size_t n = 0; n < p.nodes.size(); ++n) {
    if (!live[n]) continue;
    Node node = p.nodes[n];
    if (arity(node.op) > 0)
      for (std::int32_t* operand : {&node.a, &node.b, &node.c})
        if (*operand >= 0) *operand = id[*operand];
    id[n] = static_cast<std::int32_t>(kept.size());
    kept.push_back(node);
  }
  p.nodes = std::move(kept);
  for (std::int32_t& o : p.outputs) o = id[o];
}

}  // namespace

Gradient gradient(const Program& forward, std::span<const bool> seeded,
                  std::span<const bool> wanted) {
  if (seeded.size() != forward.outputs.size() || wanted.size() != forward.inputs.size()) {
    throw ValueError(
        fmt::format("ir::gradient: {} seeds for {} outputs and {} wanted flags for {} inputs",
                    seeded.size(), forward.outputs.size(), wanted.size(), forward.inputs.size()));
  }
  Gradient g;
  Builder b(forward, g);
  for (std::size_t j = 0; j < seeded.size(); ++j) {
    if (!seeded[j]) continue;
    const std::int32_t out = forward.outputs[j];
    b.seed(out, g.program.input(forward.dtype(out)));
  }
  b.run();
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    if (!wanted[i] || !differentiable(forward.inputs[i])) continue;
    g.program.output(b.input_gradient(static_cast<std::int32_t>(i)));
    g.inputs.push_back(static_cast<int>(i));
  }
  drop_dead_nodes(g.program);
  return g;
}

}  // namespace kiln::ir
