// Autodiff beside Tensor's own methods (requires_grad, backward, grad, zero_grad, detach):
// switching recording off for a scope. docs/autodiff.md says how gradients are recorded.
#pragma once

#include <functional>
#include <vector>

#include "kiln/detail/ops.hpp"
#include "kiln/tensor.hpp"

namespace kiln {

// While one lives, ops on this thread record nothing for backward (as torch.no_grad()): for
// evaluation, and for updating parameters in place of an optimizer. Nests; restores the mode it
// found.
class NoGradGuard {
 public:
  NoGradGuard() : was_(detail::grad_enabled()) { detail::set_grad_enabled(false); }
  ~NoGradGuard() { detail::set_grad_enabled(was_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool was_;
};

// Whether ops on this thread record for backward (false inside a NoGradGuard).
inline bool grad_enabled() { return detail::grad_enabled(); }

struct AutodiffStats {
  long long live_nodes = 0;  // recorded ops whose graph some tensor still holds
};
inline AutodiffStats autodiff_stats() { return {detail::live_autodiff_nodes()}; }

// The gradients of a one-element output with respect to each of `inputs` (leaves or results of
// recorded ops), as torch.autograd.grad with materialize_grads: zeros for an input no gradient
// reaches. Nothing is added to any leaf's grad() and no hook runs; without retain_graph the ops
// run free what they saved.
template <std::size_t E, std::size_t D>
std::vector<Tensor<D>> grad(const Tensor<E>& output, const std::vector<Tensor<D>>& inputs,
                            bool retain_graph = false) {
  std::vector<detail::Handle> in;
  for (const auto& t : inputs) in.push_back(t.handle("grad"));
  std::vector<Tensor<D>> out;
  for (auto& g : detail::gradients(output.handle("grad"), in, retain_graph))
    out.emplace_back(std::move(g));
  return out;
}

// fn(inputs...) without keeping its intermediates for backward, as
// torch.utils.checkpoint: backward runs fn again from the inputs (which are kept) and takes the
// gradient through that, trading compute for memory. fn must be deterministic (a dropout inside
// draws from its seed, so it is); tensors it captures (a module's weights) get their gradients as
// usual. The inputs share one rank D.
template <std::size_t D, std::size_t E>
Tensor<E> checkpoint(const std::function<Tensor<E>(const std::vector<Tensor<D>>&)>& fn,
                     const std::vector<Tensor<D>>& inputs) {
  std::vector<detail::Handle> in;
  for (const auto& t : inputs) in.push_back(t.handle("checkpoint"));
  auto region = [fn](const std::vector<detail::Handle>& hs) {
    std::vector<Tensor<D>> ts;
    for (const auto& h : hs) ts.emplace_back(h);
    return fn(ts).handle("checkpoint");
  };
  return Tensor<E>(detail::checkpoint(region, in));
}

}  // namespace kiln
