// GradScaler's checks, unscaling and scale schedule (include/kiln/optim/grad_scaler.hpp).
#include "kiln/optim/grad_scaler.hpp"

#include <fmt/format.h>

#include <cmath>

#include "kiln/autograd.hpp"

namespace kiln::optim {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  const auto& o = options_;
  if (!(o.init_scale > 0.0 && std::isfinite(o.init_scale)))
    throw ValueError(
        fmt::format("GradScaler: init_scale must be finite and > 0, got {}", o.init_scale));
  if (!(o.growth_factor > 1.0 && std::isfinite(o.growth_factor)))
    throw ValueError(
        fmt::format("GradScaler: growth_factor must be finite and > 1, got {}", o.growth_factor));
  if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0))
    throw ValueError(
        fmt::format("GradScaler: backoff_factor must be in (0, 1), got {}", o.backoff_factor));
  if (o.growth_interval < 1)
    throw ValueError(
        fmt::format("GradScaler: growth_interval must be >= 1, got {}", o.growth_interval));
}

void GradScaler::unscale(Optimizer& opt) {
  if (!options_.enabled) return;
  if (found_inf_.contains(&opt))
    throw ValueError(
        "GradScaler::unscale: already called for this optimizer since the last "
        "update()");
  // sum(g * 0) over every gradient is 0 when all are finite and NaN otherwise (inf * 0 is NaN):
  // one device reduction per gradient, one value read back.
  float check = 0.0f;
  {
    NoGradGuard no_grad;
    std::optional<Tensor<0>> sum;
    for (const auto& group : opt.param_groups())
      for (const auto& p : group.params) {
        const auto g = detail::grad(p.handle());
        if (!g) continue;
        const auto s = with_rank(g, [](auto t) { return (t.to(DType::f32) * 0.0f).sum(); });
        sum = sum ? *sum + s : s;
      }
    if (sum) check = sum->item();
  }
  found_inf_[&opt] = !std::isfinite(check);
  opt.scale_grads(1.0 / scale_);
}

bool GradScaler::step(Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  if (!found_inf_.contains(&opt)) unscale(opt);
  if (found_inf_.at(&opt)) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (found_inf_.empty())
    throw ValueError("GradScaler::update: no step() or unscale() since the last update()");
  bool found = false;
  for (const auto& [opt, inf] : found_inf_) found = found || inf;
  found_inf_.clear();
  if (found) {
    scale_ *= options_.backoff_factor;
    clean_steps_ = 0;
  } else if (++clean_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_steps_ = 0;
  }
}

}  // namespace kiln::optim
