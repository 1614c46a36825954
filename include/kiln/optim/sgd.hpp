// kiln::optim::SGD, torch.optim.SGD's update (maximize off):
//   g = grad + weight_decay * p
//   b = g on the first step, else momentum * b + (1 - dampening) * g     (when momentum != 0)
//   g = g + momentum * b (nesterov) or b
//   p = p - lr * g
#pragma once

#include "kiln/optim/optimizer.hpp"

namespace kiln::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  // ValueError for a negative lr, momentum or weight decay, and for nesterov without momentum
  // or with dampening (as torch's).
  SGD(std::vector<ParamGroup> groups, SGDOptions options = {});
  SGD(const std::vector<nn::AnyParameter>& params, SGDOptions options = {})
      : SGD(std::vector<ParamGroup>{{params, std::nullopt, std::nullopt}}, options) {}

 private:
  detail::Handle update(const ParamGroup& group, State& state, const detail::Handle& param,
                        const detail::Handle& grad) override;
  SGDOptions options_;
};

}  // namespace kiln::optim
