// Neural-network modules (docs/nn.md): everything under kiln/nn/ in one include.
#pragma once

#include "kiln/nn/activation.hpp"
#include "kiln/nn/data_parallel.hpp"
#include "kiln/nn/dropout.hpp"
#include "kiln/nn/embedding.hpp"
#include "kiln/nn/init.hpp"
#include "kiln/nn/linear.hpp"
#include "kiln/nn/module.hpp"
#include "kiln/nn/norm.hpp"
#include "kiln/nn/parameter.hpp"
#include "kiln/nn/sequential.hpp"
