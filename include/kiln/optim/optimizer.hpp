// kiln::optim::Optimizer: the base of SGD and AdamW (torch.optim's update rules): parameter
// groups with their own learning rate and weight decay, zero_grad, gradient clipping by global
// norm, and step().
//
// A step rebinds each parameter's slot (kiln/nn/parameter.hpp) to its updated tensor, computed
// by whole-tensor expressions under NoGradGuard: on a fused device each parameter's update is one
// element-wise group, so one kernel; hyper-parameters are kernel scalars, so a schedule that
// changes lr every step compiles nothing new. Nothing in step() or clip_grad_norm() reads a value
// back to the host.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "kiln/nn/module.hpp"

namespace kiln::optim {

// Parameters sharing hyper-parameters. Unset lr / weight_decay take the optimizer's own; after
// construction the optimizer's groups hold both.
struct ParamGroup {
  std::vector<nn::AnyParameter> params;
  std::optional<double> lr;
  std::optional<double> weight_decay;
};

// Two groups as GPT-2 training uses them: parameters of rank >= 2 (matmul weights, embeddings)
// with `weight_decay`, the rest (biases, norm weights) with none.
std::vector<ParamGroup> decay_groups(const nn::Module& module, double weight_decay);

// sqrt of the sum of every gradient's squares (parameters without a gradient count 0), in f32,
// on the parameters' device: no host sync.
Tensor<0> grad_norm(const std::vector<nn::AnyParameter>& params);

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Updates every parameter that has a gradient (those without one are left alone, as torch's),
  // scaled by scale_grads' factor and the coefficient of a clip_grad_norm since the last step.
  void step();
  // Clears the gradients of every parameter (set_to_none: grad() is empty until the next
  // backward), and with them a pending scale_grads factor and clipping coefficient.
  void zero_grad();
  // As torch.nn.utils.clip_grad_norm_: the global norm of the gradients as step() will read them
  // (times a scale_grads factor; returned, before clipping), and the next step() scales them by
  // min(1, max_norm / (norm + 1e-6)). The coefficient stays a device tensor: no host sync.
  Tensor<0> clip_grad_norm(double max_norm);
  // The gradients of this backward are `factor` times what they should be: step() and
  // clip_grad_norm() read them multiplied by it (factors multiply) until step() or zero_grad().
  // GradScaler's unscale: kiln's gradients are values, so the factor travels with the optimizer
  // instead of rewriting grad(), which is left as it is. ValueError unless factor is finite and
  // > 0.
  void scale_grads(double factor);

  // Sets every group's learning rate (a schedule calls this before each step).
  void set_lr(double lr);
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Steps taken so far.
  std::int64_t steps() const { return steps_; }

 protected:
  // The per-parameter state of a subclass (momentum buffer, Adam moments), as handles of the
  // parameter's rank.
  struct State {
    std::vector<detail::Handle> tensors;
    std::int64_t step = 0;
  };
  Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, const char* name);
  // One parameter's update: returns its new value (the slot is rebound by step()).
  virtual detail::Handle update(const ParamGroup& group, State& state, const detail::Handle& param,
                                const detail::Handle& grad) = 0;
  // A parameter of a group's step, with its gradient as backward left it (step() has counted the
  // step in state).
  struct Item {
    const nn::AnyParameter* param;
    detail::Handle grad;
    State* state;
  };
  // Every parameter of a group at once (a multi-tensor kernel), reading each gradient multiplied
  // by factor and by clip (a device scalar, or none); rebinds the parameters and updates the
  // state. Returns false, having changed nothing, where it cannot (the default): step() then
  // calls update() per parameter.
  virtual bool update_all(const ParamGroup& group, std::span<const Item> items, double factor,
                          const std::optional<Tensor<0>>& clip) {
    (void)group, (void)items, (void)factor, (void)clip;
    return false;
  }

 private:
  std::vector<ParamGroup> groups_;
  std::map<const nn::ParameterSlot*, State> state_;
  std::optional<Tensor<0>> clip_coef_;
  double grad_factor_ = 1.0;  // scale_grads' since the last step or zero_grad
  std::int64_t steps_ = 0;
};

// Calls f(Tensor<D>(h)) with h's rank as D (0 to 4; ShapeError beyond): the optimizers' updates
// are written once, as templates over the rank.
template <class F>
auto with_rank(const detail::Handle& h, F&& f) {
  switch (detail::shape(h).size()) {
    case 0:
      return f(Tensor<0>(h));
    case 1:
      return f(Tensor<1>(h));
    case 2:
      return f(Tensor<2>(h));
    case 3:
      return f(Tensor<3>(h));
    case 4:
      return f(Tensor<4>(h));
    default:
      throw ShapeError("optimizer: parameters of rank " + std::to_string(detail::shape(h).size()) +
                       " are not supported (0 to 4)");
  }
}

}  // namespace kiln::optim
