// WarmupCosine (include/kiln/optim/schedule.hpp).
#include "kiln/optim/schedule.hpp"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "kiln/error.hpp"

namespace kiln::optim {

double WarmupCosine::operator()(std::int64_t step) const {
  if (step < 0 || warmup_steps < 0 || decay_steps < warmup_steps || min_lr > max_lr)
    throw ValueError(fmt::format(
        "WarmupCosine: needs step >= 0, 0 <= warmup_steps <= decay_steps and min_lr <= max_lr; "
        "got step {}, warmup_steps {}, decay_steps {}, min_lr {}, max_lr {}",
        step, warmup_steps, decay_steps, min_lr, max_lr));
  if (step < warmup_steps)
    return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (step > decay_steps) return min_lr;
  if (decay_steps == warmup_steps) return min_lr;
  const double ratio =
      static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps - warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return min_lr + coeff * (max_lr - min_lr);
}

}  // namespace kiln::optim
