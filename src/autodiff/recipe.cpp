#include "autodiff/recipe.hpp"

#include <array>
#include <cstdint>
#include <span>
#include <utility>

namespace kiln::autodiff {
namespace {

// Appends `src`'s nodes that `keep` marks to `dst`, its input and scalar leaves mapped to the
// dst nodes `inputs` and `scalars` name; returns src node id -> dst node id (-1 where skipped).
std::vector<std::int32_t> emit(const ir::Program& src, const std::vector<bool>& keep,
                               const std::vector<std::int32_t>& inputs,
                               const std::vector<std::int32_t>& scalars, ir::Program& dst) {
  std::vector<std::int32_t> to(src.nodes.size(), -1);
  for (std::size_t i = 0; i < src.nodes.size(); ++i) {
    if (!keep[i]) continue;
    const ir::Node& n = src.nodes[i];
    switch (n.op) {
      case ir::Op::input:
        to[i] = inputs[static_cast<std::size_t>(n.a)];
        break;
      case ir::Op::scalar:
        to[i] = scalars[static_cast<std::size_t>(n.a)];
        break;
      case ir::Op::index:
        to[i] = dst.index();
        break;
      default: {
        ir::Node m = n;
        for (std::int32_t* operand : {&m.a, &m.b, &m.c})
          if (*operand >= 0) *operand = to[static_cast<std::size_t>(*operand)];
        dst.nodes.push_back(m);
        to[i] = static_cast<std::int32_t>(dst.nodes.size() - 1);
      }
    }
  }
  return to;
}

// The nodes the outputs `outputs` of `p` depend on.
std::vector<bool> live_nodes(const ir::Program& p, std::span<const std::int32_t> outputs) {
  std::vector<bool> keep(p.nodes.size(), false);
  for (std::int32_t o : outputs) keep[static_cast<std::size_t>(o)] = true;
  for (std::size_t i = p.nodes.size(); i-- > 0;) {
    if (!keep[i]) continue;
    for (std::int32_t operand : {p.nodes[i].a, p.nodes[i].b, p.nodes[i].c})
      if (operand >= 0 && p.nodes[i].op > ir::Op::index)
        keep[static_cast<std::size_t>(operand)] = true;
  }
  return keep;
}

}  // namespace

std::vector<bool> inputs_read(const ir::Program& p, std::optional<std::size_t> o) {
  const std::span<const std::int32_t> outputs =
      o ? std::span<const std::int32_t>(&p.outputs.at(*o), 1) : std::span(p.outputs);
  const std::vector<bool> live = live_nodes(p, outputs);
  std::vector<bool> read(p.inputs.size(), false);
  for (std::size_t i = 0; i < p.nodes.size(); ++i)
    if (live[i] && p.nodes[i].op == ir::Op::input)
      read[static_cast<std::size_t>(p.nodes[i].a)] = true;
  return read;
}

const std::shared_ptr<const Recipe>& placeholder(DType dtype) {
  // One per dtype, made once: a recorded op fills every unread input with one.
  static const auto all = [] {
    std::array<std::shared_ptr<const Recipe>, detail::kNumDTypes> a;
    for (int t = 0; t < detail::kNumDTypes; ++t) {
      Recipe r;
      r.program.output(r.program.scalar(static_cast<DType>(t)));
      r.scalars.push_back(0.0);
      a[static_cast<std::size_t>(t)] = std::make_shared<const Recipe>(std::move(r));
    }
    return a;
  }();
  return all[static_cast<std::size_t>(dtype)];
}

ir::Program substitute(const ir::Program& p, std::size_t slot, const ir::Program& r) {
  ir::Program out;
  std::vector<std::int32_t> p_in(p.inputs.size(), -1), r_in, p_sc, r_sc;
  for (std::size_t k = 0; k < p.inputs.size(); ++k)
    if (k != slot) p_in[k] = out.input(p.inputs[k]);
  for (DType t : r.inputs) r_in.push_back(out.input(t));
  for (DType t : p.scalars) p_sc.push_back(out.scalar(t));
  for (DType t : r.scalars) r_sc.push_back(out.scalar(t));
  const auto r_to = emit(r, std::vector<bool>(r.nodes.size(), true), r_in, r_sc, out);
  p_in[slot] = r_to[static_cast<std::size_t>(r.outputs.at(0))];
  const auto p_to = emit(p, std::vector<bool>(p.nodes.size(), true), p_in, p_sc, out);
  for (std::int32_t o : p.outputs) out.output(p_to[static_cast<std::size_t>(o)]);
  return out;
}

Recipe extract(const ir::Program& p, std::size_t o, const std::vector<Handle>& inputs,
               const std::vector<double>& scalars) {
  const std::vector<bool> keep = live_nodes(p, std::span(&p.outputs.at(o), 1));
  Recipe r;
  std::vector<std::int32_t> in(p.inputs.size(), -1), sc(p.scalars.size(), -1);
  for (std::size_t i = 0; i < p.nodes.size(); ++i) {
    if (!keep[i]) continue;
    const ir::Node& n = p.nodes[i];
    const auto a = static_cast<std::size_t>(n.a);
    if (n.op == ir::Op::input && in[a] < 0) {
      in[a] = r.program.input(p.inputs[a]);
      r.inputs.push_back(inputs[a]);
    } else if (n.op == ir::Op::scalar && sc[a] < 0) {
      sc[a] = r.program.scalar(p.scalars[a]);
      r.scalars.push_back(scalars[a]);
    }
  }
  const auto to = emit(p, keep, in, sc, r.program);
  r.program.output(to[static_cast<std::size_t>(p.outputs[o])]);
  return r;
}

}  // namespace kiln::autodiff
