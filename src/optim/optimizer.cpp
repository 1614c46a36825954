// Optimizer's groups, step loop and clipping (include/kiln/optim/optimizer.hpp).
#include "kiln/optim/optimizer.hpp"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "kiln/autograd.hpp"

namespace kiln::optim {

std::vector<ParamGroup> decay_groups(const nn::Module& module, double weight_decay) {
  ParamGroup decay{{}, std::nullopt, weight_decay}, no_decay{{}, std::nullopt, 0.0};
  for (const auto& p : module.parameters()) (p.rank() >= 2 ? decay : no_decay).params.push_back(p);
  return {decay, no_decay};
}

Tensor<0> grad_norm(const std::vector<nn::AnyParameter>& params) {
  std::vector<detail::Handle> grads;
  NoGradGuard no_grad;
  for (const auto& p : params)
    if (auto g = detail::grad(p.handle())) grads.push_back(g);
  if (grads.empty())
    return Tensor<0>::zeros({}, DType::f32, params.empty() ? Device::cpu() : params[0].device());
  // One call over every gradient (CUDA: two kernels, where a sum each took 350 launches for a
  // GPT-2).
  return Tensor<0>(detail::sum_of_squares(grads)).sqrt();
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay,
                     const char* name)
    : groups_(std::move(groups)) {
  std::set<const nn::ParameterSlot*> seen;
  for (auto& g : groups_) {
    if (!g.lr) g.lr = lr;
    if (!g.weight_decay) g.weight_decay = weight_decay;
    if (!(*g.lr >= 0.0)) throw ValueError(fmt::format("{}: lr must be >= 0, got {}", name, *g.lr));
    if (!(*g.weight_decay >= 0.0))
      throw ValueError(fmt::format("{}: weight_decay must be >= 0, got {}", name, *g.weight_decay));
    for (const auto& p : g.params) {
      if (!p.defined()) throw ValueError(fmt::format("{}: an empty parameter was given", name));
      if (!seen.insert(p.slot().get()).second)
        throw ValueError(fmt::format("{}: a parameter appears in more than one group", name));
    }
  }
}

void Optimizer::step() {
  NoGradGuard no_grad;
  std::vector<Item> items;
  for (const auto& g : groups_) {
    items.clear();
    for (const auto& p : g.params) {
      auto grad = detail::grad(p.handle());
      if (!grad) continue;
      auto& state = state_[p.slot().get()];
      ++state.step;
      items.push_back({&p, std::move(grad), &state});
    }
    if (items.empty() || update_all(g, items, grad_factor_, clip_coef_)) continue;
    for (const Item& it : items) {
      auto grad = it.grad;
      const DType dtype = detail::dtype(grad);
      if (grad_factor_ != 1.0)
        grad = detail::binary(detail::Binary::mul, grad, detail::Scalar{grad_factor_, false});
      if (clip_coef_) grad = detail::binary(detail::Binary::mul, grad, clip_coef_->handle());
      if (detail::dtype(grad) != dtype) grad = detail::cast(grad, dtype);
      it.param->assign(update(g, *it.state, it.param->handle(), grad));
    }
  }
  clip_coef_.reset();
  grad_factor_ = 1.0;
  ++steps_;
}

void Optimizer::zero_grad() {
  for (const auto& g : groups_)
    for (const auto& p : g.params) p.zero_grad();
  // Both belong to the gradients just cleared (a step GradScaler skipped leaves them behind).
  clip_coef_.reset();
  grad_factor_ = 1.0;
}

void Optimizer::scale_grads(double factor) {
  if (!(factor > 0.0 && std::isfinite(factor)))
    throw ValueError(fmt::format("scale_grads: factor must be finite and > 0, got {}", factor));
  grad_factor_ *= factor;
}

Tensor<0> Optimizer::clip_grad_norm(double max_norm) {
  if (!(max_norm > 0.0))
    throw ValueError(fmt::format("clip_grad_norm: max_norm must be > 0, got {}", max_norm));
  std::vector<nn::AnyParameter> all;
  for (const auto& g : groups_) all.insert(all.end(), g.params.begin(), g.params.end());
  NoGradGuard no_grad;
  const auto norm = grad_norm(all) * static_cast<float>(grad_factor_);
  clip_coef_ = minimum(static_cast<float>(max_norm) / (norm + 1e-6f), 1.0f);
  return norm;
}

void Optimizer::set_lr(double lr) {
  if (!(lr >= 0.0)) throw ValueError(fmt::format("set_lr: lr must be >= 0, got {}", lr));
  for (auto& g : groups_) g.lr = lr;
}

}  // namespace kiln::optim
