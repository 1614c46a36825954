// Optimizers, gradient clipping and learning-rate schedules (docs/nn.md): kiln/optim/ in one
// include.
#pragma once

#include "kiln/optim/adamw.hpp"
#include "kiln/optim/grad_scaler.hpp"
#include "kiln/optim/optimizer.hpp"
#include "kiln/optim/schedule.hpp"
#include "kiln/optim/sgd.hpp"
