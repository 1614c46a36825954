// kiln::optim::GradScaler, torch.amp.GradScaler's dynamic loss scaling for f16 autocast
// (docs/autocast.md): f16 loses precision below 6e-5 and holds nothing below 6e-8, so small
// gradients vanish in the f16 parts of backward. The loss is multiplied by a large scale before
// backward, the gradients are divided by it before the step, and the step is skipped when a
// gradient came out inf or NaN (the scale was too large): the scale halves then, and doubles after
// growth_interval steps without one. bf16 has f32's range and needs none.
//
//   kiln::optim::GradScaler scaler;
//   { kiln::Autocast on(kiln::DType::f16); loss = model.loss(x, y); }
//   scaler.scale(loss).backward();
//   scaler.unscale(opt);           // optional: only to clip the true gradients
//   opt.clip_grad_norm(1.0);
//   scaler.step(opt);              // opt.step(), unless a gradient is inf or NaN
//   scaler.update();
//   opt.zero_grad();
//
// Unscaling does not rewrite grad() (kiln's gradients are values): it hands 1 / scale to the
// optimizer (Optimizer::scale_grads), which step() and clip_grad_norm() apply. Checking for inf
// reads one value back to the host per optimizer and step, as PyTorch's step() does.
#pragma once

#include <cstdint>
#include <map>

#include "kiln/optim/optimizer.hpp"

namespace kiln::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16, torch's
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  bool enabled = true;  // false: every call passes through (scale 1, no checks), as torch's
};

class GradScaler {
 public:
  // ValueError for init_scale or growth_factor not finite and > 0 (growth_factor > 1),
  // backoff_factor outside (0, 1), growth_interval < 1.
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (loss itself when disabled): call backward on this.
  template <std::size_t D>
  Tensor<D> scale(const Tensor<D>& loss) const {
    return options_.enabled ? loss * static_cast<float>(scale_) : loss;
  }
  // Divides opt's gradients by the scale (as step() and clip_grad_norm() read them) and records
  // whether any is inf or NaN. Once per optimizer between update()s: again is a ValueError.
  void unscale(Optimizer& opt);
  // unscale(opt) unless done, then opt.step() if every gradient is finite. Returns whether it
  // stepped.
  bool step(Optimizer& opt);
  // The next scale: backoff_factor times this one after a step that found inf or NaN, else
  // growth_factor times it after growth_interval clean steps in a row. ValueError when nothing
  // was unscaled since the last update().
  void update();

  double get_scale() const { return options_.enabled ? scale_ : 1.0; }

 private:
  GradScalerOptions options_;
  double scale_;
  std::int64_t clean_steps_ = 0;
  // Per optimizer unscaled since the last update(): whether it found inf or NaN.
  std::map<const Optimizer*, bool> found_inf_;
};

}  // namespace kiln::optim
