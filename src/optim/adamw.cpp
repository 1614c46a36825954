// AdamW's update (include/kiln/optim/adamw.hpp): one multi-tensor kernel per group where the
// device has it (detail::adamw_update), else whole-tensor expressions per parameter; the bias
// corrections are host scalars of the step count.
#include "kiln/optim/adamw.hpp"

#include <fmt/format.h>

#include <cmath>
#include <vector>

namespace kiln::optim {

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, "AdamW"), options_(options) {
  if (!(options.beta1 >= 0.0 && options.beta1 < 1.0) ||
      !(options.beta2 >= 0.0 && options.beta2 < 1.0))
    throw ValueError(
        fmt::format("AdamW: betas must be in [0, 1), got {} and {}", options.beta1, options.beta2));
  if (!(options.eps >= 0.0))
    throw ValueError(fmt::format("AdamW: eps must be >= 0, got {}", options.eps));
}

bool AdamW::update_all(const ParamGroup& group, std::span<const Item> items, double factor,
                       const std::optional<Tensor<0>>& clip) {
  const std::int64_t step = items.front().state->step;
  std::vector<detail::AdamWInput> in;
  for (const Item& it : items) {
    if (it.state->step != step) return false;  // bias corrections differ: per parameter
    const auto& st = it.state->tensors;
    in.push_back(
        {it.param->handle(), it.grad, st.empty() ? nullptr : st[0], st.empty() ? nullptr : st[1]});
  }
  const double b1 = options_.beta1, b2 = options_.beta2, t = static_cast<double>(step);
  const detail::AdamWHyper h{*group.lr,
                             *group.weight_decay,
                             b1,
                             b2,
                             options_.eps,
                             1.0 - std::pow(b1, t),
                             1.0 - std::pow(b2, t),
                             factor,
                             clip ? clip->handle() : nullptr};
  const std::vector<detail::AdamWOutput> out = detail::adamw_update(in, h);
  if (out.empty()) return false;
  for (std::size_t i = 0; i < items.size(); ++i) {
    items[i].param->assign(out[i].param);
    items[i].state->tensors = {out[i].m, out[i].v};
  }
  return true;
}

detail::Handle AdamW::update(const ParamGroup& group, State& state, const detail::Handle& param,
                             const detail::Handle& grad) {
  const double lr = *group.lr, wd = *group.weight_decay;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const auto t = static_cast<double>(state.step);
  const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
  return with_rank(param, [&](auto p) {
    using T = decltype(p);
    const auto g = T(grad);
    T m = g * static_cast<float>(1.0 - b1), v = g * g * static_cast<float>(1.0 - b2);
    if (!state.tensors.empty()) {
      m = T(state.tensors[0]) * static_cast<float>(b1) + m;
      v = T(state.tensors[1]) * static_cast<float>(b2) + v;
    }
    state.tensors = {m.handle(), v.handle()};
    const auto decayed = wd != 0.0 ? p * static_cast<float>(1.0 - lr * wd) : p;
    const auto denom =
        v.sqrt() * static_cast<float>(1.0 / std::sqrt(bc2)) + static_cast<float>(options_.eps);
    return (decayed - m / denom * static_cast<float>(lr / bc1)).to(p.dtype()).handle();
  });
}

}  // namespace kiln::optim
