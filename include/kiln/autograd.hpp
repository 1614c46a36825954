// Autodiff beside Tensor's own methods (requires_grad, backward, grad, zero_grad, detach):
// switching recording off for a scope. docs/autodiff.md says how gradients are recorded.
#pragma once

#include "kiln/detail/ops.hpp"

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

}  // namespace kiln
