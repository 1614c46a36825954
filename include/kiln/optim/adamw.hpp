// kiln::optim::AdamW, torch.optim.AdamW's update (amsgrad and maximize off), with its defaults:
//   p = p * (1 - lr * weight_decay)                       (decoupled weight decay)
//   m = beta1 * m + (1 - beta1) * g,   v = beta2 * v + (1 - beta2) * g^2
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// m and v start at zero and have the parameter's dtype.
#pragma once

#include "kiln/optim/optimizer.hpp"

namespace kiln::optim {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW : public Optimizer {
 public:
  // ValueError for a negative lr, eps or weight decay, or a beta outside [0, 1).
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});
  AdamW(const std::vector<nn::AnyParameter>& params, AdamWOptions options = {})
      : AdamW(std::vector<ParamGroup>{{params, std::nullopt, std::nullopt}}, options) {}

 private:
  detail::Handle update(const ParamGroup& group, State& state, const detail::Handle& param,
                        const detail::Handle& grad) override;
  // One multi-tensor kernel for the group where the device has one (CUDA), its parameters f32
  // and at one step count.
  bool update_all(const ParamGroup& group, std::span<const Item> items, double factor,
                  const std::optional<Tensor<0>>& clip) override;
  AdamWOptions options_;
};

}  // namespace kiln::optim
