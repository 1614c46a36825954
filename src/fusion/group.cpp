#include "fusion/group.hpp"

#include <array>

namespace kiln::fusion {
namespace {

bool same_view(const detail::TensorImpl& a, const detail::TensorImpl& b) {
  return a.buffer == b.buffer && a.offset == b.offset && a.dtype == b.dtype &&
         a.strides == b.strides;
}

}  // namespace

void Group::clear() {
  serial = 0;
  shape.clear();
  ops = 0;
  program.inputs.clear();
  program.scalars.clear();
  program.nodes.clear();
  program.outputs.clear();
  inputs.clear();
  input_nodes.clear();
  scalars.clear();
  outputs.clear();
}

bool Group::reads_in_registers(const detail::TensorImpl& input) const {
  const PendingBuffer* p = unbound(input);
  return p && p->node >= 0 && p->group == serial && input.offset == 0 && input.is_contiguous();
}

std::uint64_t Group::in_registers(std::span<const detail::TensorImpl* const> in) const {
  std::uint64_t bits = 0;
  if (empty()) return bits;
  for (std::size_t i = 0; i < in.size(); ++i)
    if (reads_in_registers(*in[i])) bits |= std::uint64_t{1} << i;
  return bits;
}

bool Group::fits(std::span<const detail::TensorImpl* const> in, std::uint64_t in_regs) const {
  if (ops + 1 > kMaxOps) return false;
  std::size_t added = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in_regs >> i & 1) continue;
    bool known = false;
    for (const auto& have : inputs) known = known || same_view(have, *in[i]);
    added += !known;
  }
  return inputs.size() + added <= kMaxInputs;
}

std::int32_t Group::input_slot(const detail::TensorImpl& t) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (same_view(inputs[i], t)) return input_nodes[i];
  }
  inputs.push_back(t);
  input_nodes.push_back(program.input(t.dtype));
  return input_nodes.back();
}

void Group::append(const ir::Program& call, std::span<const detail::TensorImpl* const> in,
                   std::uint64_t in_regs, std::span<const double> call_scalars,
                   std::span<const detail::TensorImpl* const> outs) {
  // The call's node ids -> this program's.
  // (On the stack for the few nodes of a front-end op: this runs for every recorded op.)
  std::array<std::int32_t, 16> id_inline;
  std::vector<std::int32_t> id_heap(call.nodes.size() > id_inline.size() ? call.nodes.size() : 0);
  std::int32_t* id = id_heap.empty() ? id_inline.data() : id_heap.data();
  auto map = [id](std::int32_t n) { return n < 0 ? n : id[n]; };
  for (std::size_t n = 0; n < call.nodes.size(); ++n) {
    const ir::Node& node = call.nodes[n];
    if (node.op == ir::Op::input) {
      const detail::TensorImpl& t = *in[node.a];
      id[n] = in_regs >> node.a & 1 ? unbound(t)->node : input_slot(t);
    } else if (node.op == ir::Op::scalar) {
      id[n] = program.scalar(node.dtype);
      scalars.push_back(call_scalars[node.a]);
    } else {
      program.nodes.push_back({node.op, node.dtype, map(node.a), map(node.b), map(node.c)});
      id[n] = static_cast<std::int32_t>(program.nodes.size() - 1);
    }
  }
  for (std::size_t k = 0; k < outs.size(); ++k) {
    auto* buffer = static_cast<PendingBuffer*>(outs[k]->buffer.get());
    buffer->group = serial;
    buffer->node = id[call.outputs[k]];
    outputs.push_back({outs[k]->buffer, buffer->node});
  }
  ++ops;
}

}  // namespace kiln::fusion
