// Learning-rate schedules: the lr for a step, computed on the host (a plain number; the
// optimizer passes it to its kernels as a scalar parameter).
#pragma once

#include <cstdint>

namespace kiln::optim {

// Linear warmup then cosine decay, as nanoGPT's get_lr: for step < warmup_steps,
// max_lr * (step + 1) / warmup_steps; past decay_steps, min_lr; between, min_lr plus the cosine
// from max_lr down to min_lr over [warmup_steps, decay_steps].
struct WarmupCosine {
  double max_lr;
  double min_lr;
  std::int64_t warmup_steps;
  std::int64_t decay_steps;
  // ValueError for negative steps, decay_steps < warmup_steps or min_lr > max_lr.
  double operator()(std::int64_t step) const;
};

}  // namespace kiln::optim
