// kiln::nn::Parameter<D>: a trainable tensor shared by the module that owns it, the optimizers
// that update it and any module tied to it.
//
// kiln's tensors are immutable values: an optimizer step makes a new tensor for each parameter
// rather than writing into the old one. So a parameter is not a tensor but a slot that holds the
// current one; copies of a Parameter share the slot (that is how weights are tied), and a step
// that rebinds the slot is seen by every holder at once.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include "kiln/tensor.hpp"

namespace kiln::nn {

// The current tensor of one parameter. Always a leaf that requires a gradient.
struct ParameterSlot {
  detail::Handle value;
};

// A parameter of any rank: what modules register and optimizers walk.
class AnyParameter {
 public:
  bool defined() const { return slot_ != nullptr; }
  // The slot itself: equal for tied parameters.
  const std::shared_ptr<ParameterSlot>& slot() const { return slot_; }
  const detail::Handle& handle() const;
  std::size_t rank() const { return detail::shape(handle()).size(); }
  Dims shape() const { return detail::shape(handle()); }
  std::int64_t numel() const { return detail::numel(handle()); }
  DType dtype() const { return detail::dtype(handle()); }
  Device device() const { return detail::device(handle()); }
  // Rebinds the slot to a new value of any rank (state_dict loading, to(device), optimizer steps):
  // the value is detached from any graph and marked as requiring a gradient.
  void assign(detail::Handle value) const;
  void zero_grad() const { detail::zero_grad(handle()); }

 protected:
  std::shared_ptr<ParameterSlot> slot_;
};

template <std::size_t D>
class Parameter : public AnyParameter {
 public:
  // An empty parameter (a Linear without bias holds one); using it throws ValueError.
  Parameter() = default;
  explicit Parameter(const Tensor<D>& init) {
    slot_ = std::make_shared<ParameterSlot>();
    assign(init.handle("Parameter"));
  }
  // The current value (a leaf requiring a gradient): use it in forward like any tensor.
  Tensor<D> tensor() const { return Tensor<D>(handle()); }
  std::optional<Tensor<D>> grad() const { return tensor().grad(); }
  // Rebinds the slot (every holder of this parameter sees the new value). Shape and dtype may
  // change only through set; load_state_dict checks them.
  void set(const Tensor<D>& value) const { assign(value.handle("Parameter::set")); }
  // Makes this parameter the same slot as `other` (weight tying): the two uses' gradients land
  // in one grad and sum.
  void tie(const Parameter& other) { slot_ = other.slot_; }
};

}  // namespace kiln::nn
