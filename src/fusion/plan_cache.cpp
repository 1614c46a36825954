#include "fusion/plan_cache.hpp"

#include <memory>

#include "ir/hashed_cache.hpp"

namespace kiln::fusion {
namespace {

// Keeps only the nodes the outputs depend on, renumbering nodes, inputs and scalars in order.
Plan prune(const ir::Program& p) {
  std::vector<bool> live(p.nodes.size(), false);
  for (auto o : p.outputs) live[o] = true;
  for (std::size_t n = p.nodes.size(); n-- > 0;) {
    if (!live[n]) continue;
    for (std::int32_t operand : {p.nodes[n].a, p.nodes[n].b, p.nodes[n].c}) {
      if (operand >= 0 && ir::arity(p.nodes[n].op) > 0) live[operand] = true;
    }
  }
  Plan plan;
  std::vector<std::int32_t> id(p.nodes.size(), -1);
  for (std::size_t n = 0; n < p.nodes.size(); ++n) {
    if (!live[n]) continue;
    const ir::Node& node = p.nodes[n];
    if (node.op == ir::Op::input) {
      plan.input_slots.push_back(node.a);
      id[n] = plan.program.input(node.dtype);
    } else if (node.op == ir::Op::scalar) {
      plan.scalar_slots.push_back(node.a);
      id[n] = plan.program.scalar(node.dtype);
    } else {
      auto map = [&id](std::int32_t k) { return k < 0 ? k : id[k]; };
      plan.program.nodes.push_back({node.op, node.dtype, map(node.a), map(node.b), map(node.c)});
      id[n] = static_cast<std::int32_t>(plan.program.nodes.size() - 1);
    }
  }
  for (auto o : p.outputs) plan.program.output(id[o]);
  return plan;
}

}  // namespace

PlanLookup plan_for(const ir::Program& recorded) {
  struct Entry {
    ir::Program recorded;
    std::shared_ptr<const Plan> plan;
  };
  static ir::HashedCache<Entry> plans;
  const std::uint64_t hash = recorded.structure_hash();
  if (const Entry* e = plans.find(hash, [&](const Entry& e) { return e.recorded == recorded; }))
    return {e->plan, true};
  return {plans.insert(hash, {recorded, std::make_shared<const Plan>(prune(recorded))}).plan,
          false};
}

}  // namespace kiln::fusion
