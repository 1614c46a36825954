// The backward pass: gather the nodes, run them in reverse recording order.
#include "autodiff/engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autodiff/tensor_ops.hpp"
#include "kiln/error.hpp"

namespace kiln::autodiff {

namespace {

struct GradModeOff {
  bool was = grad_enabled();
  GradModeOff() { set_grad_enabled(false); }
  ~GradModeOff() { set_grad_enabled(was); }
};

// Every node behind the roots' metas, latest recorded first (a node's inputs come from earlier
// nodes, so this is a reverse topological order).
std::vector<Node*> nodes_behind(std::span<Meta* const> roots) {
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<Meta*> todo(roots.begin(), roots.end());
  while (!todo.empty()) {
    Meta* m = todo.back();
    todo.pop_back();
    for (const auto& w : m->writers) {
      if (!seen.insert(w.get()).second) continue;
      order.push_back(w.get());
      for (const Edge& e : w->edges) todo.push_back(e.meta.get());
    }
  }
  std::sort(order.begin(), order.end(),
            [](const Node* a, const Node* b) { return a->sequence > b->sequence; });
  return order;
}

}  // namespace

void backward(std::span<const Root> roots, bool retain_graph,
              const std::function<Backend&(Device)>& backend, Captures* capture) {
  GradModeOff off;
  // Where a gradient of m goes: a capture, a leaf's grad, a non-leaf's pending one; nowhere for
  // a leaf that kiln::grad did not ask for.
  auto slot = [capture](Meta& m) -> Handle* {
    if (capture && m.leaf()) {
      auto it = capture->find(&m);
      return it == capture->end() ? nullptr : &it->second;
    }
    return m.leaf() ? &m.grad : &m.pending;
  };
  std::vector<Meta*> root_metas;
  for (const Root& r : roots) {
    Meta* m = r.tensor->buffer->autograd.get();
    if (m == nullptr)
      throw ValueError(
          "backward: the tensor does not need a gradient (no input of the ops that "
          "made it was marked with requires_grad, or they ran under NoGradGuard)");
    if (Handle* to = slot(*m)) accumulate(backend(m->device), *to, *m, View::of(*r.tensor), r.grad);
    root_metas.push_back(m);
  }
  const std::vector<Node*> order = nodes_behind(root_metas);

  // How many nodes still read each non-leaf's pending gradient, so it is freed after the last;
  // and how many still add to each leaf's, so its hooks run as soon as it is final.
  std::unordered_map<Meta*, int> readers, adders;
  for (Node* n : order) {
    for (const auto& o : n->outputs)
      if (auto m = o.meta.lock()) ++readers[m.get()];
    for (const Edge& e : n->edges)
      if (e.meta->leaf()) ++adders[e.meta.get()];
  }
  auto final_leaf = [capture](Meta& m) {
    if (!capture)
      for (const auto& hook : m.hooks) hook(m.grad);
  };
  for (Meta* m : root_metas)
    if (m->leaf() && adders.count(m) == 0) final_leaf(*m);

  // A node's edges will get nothing more from it: a leaf whose last adder this was is final.
  auto passed = [&](Node* n) {
    for (const Edge& e : n->edges)
      if (e.meta->leaf() && --adders[e.meta.get()] == 0 && e.meta->grad) final_leaf(*e.meta);
  };
  for (Node* n : order) {
    std::vector<Handle> grads(n->outputs.size());
    bool any = false;
    for (std::size_t i = 0; i < n->outputs.size(); ++i) {
      const std::shared_ptr<Meta> m = n->outputs[i].meta.lock();
      if (!m) continue;
      if (m->pending) {
        grads[i] = std::make_shared<TensorImpl>(n->outputs[i].view.over(*m->pending));
        any = true;
        // Complete now (every reader of m ran before its writers): a captured non-leaf's.
        if (capture)
          if (auto it = capture->find(m.get()); it != capture->end()) it->second = m->pending;
      }
      if (--readers[m.get()] == 0) m->pending.reset();  // (grads[i] keeps what it needs)
    }
    if (!any) {
      passed(n);
      continue;
    }
    if (n->released) {
      throw ValueError(fmt::format(
          "backward: the {} op's saved tensors were freed by an earlier backward; pass "
          "retain_graph = true to the first backward to run backward through the graph again",
          n->name()));
    }
    Backend& be = backend(n->device);
    const std::vector<Handle> in_grads = n->backward(be, grads);
    for (std::size_t e = 0; e < n->edges.size(); ++e)
      if (Handle* to = slot(*n->edges[e].meta); to && in_grads[e])
        accumulate(be, *to, *n->edges[e].meta, n->edges[e].view, in_grads[e]);
    if (!retain_graph && n->release()) n->released = true;
    passed(n);
  }
}

}  // namespace kiln::autodiff
