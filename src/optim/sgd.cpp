// SGD's update (include/kiln/optim/sgd.hpp): whole-tensor expressions, one fused group each.
#include "kiln/optim/sgd.hpp"

#include <fmt/format.h>

namespace kiln::optim {

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, "SGD"), options_(options) {
  if (!(options.momentum >= 0.0))
    throw ValueError(fmt::format("SGD: momentum must be >= 0, got {}", options.momentum));
  if (options.nesterov && (options.momentum <= 0.0 || options.dampening != 0.0))
    throw ValueError("SGD: nesterov needs a momentum > 0 and zero dampening");
}

detail::Handle SGD::update(const ParamGroup& group, State& state, const detail::Handle& param,
                           const detail::Handle& grad) {
  const auto lr = static_cast<float>(*group.lr);
  const auto wd = static_cast<float>(*group.weight_decay);
  const auto momentum = static_cast<float>(options_.momentum);
  return with_rank(param, [&](auto p) {
    using T = decltype(p);
    auto g = T(grad);
    if (wd != 0.0f) g = g + p * wd;
    if (momentum != 0.0f) {
      T buf = state.tensors.empty() ? g
                                    : T(state.tensors[0]) * momentum +
                                          g * static_cast<float>(1.0 - options_.dampening);
      state.tensors = {buf.handle()};
      g = options_.nesterov ? g + buf * momentum : buf;
    }
    return (p - g * lr).to(p.dtype()).handle();
  });
}

}  // namespace kiln::optim
