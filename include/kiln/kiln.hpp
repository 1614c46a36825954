// kiln: a C++ tensor library with fused, run-time compiled kernels and features you can see.
#pragma once

#include "kiln/attention.hpp"
#include "kiln/autocast.hpp"
#include "kiln/autograd.hpp"
#include "kiln/checkpoint.hpp"
#include "kiln/config.hpp"
#include "kiln/device.hpp"
#include "kiln/dist.hpp"
#include "kiln/dtype.hpp"
#include "kiln/error.hpp"
#include "kiln/format.hpp"
#include "kiln/linear.hpp"
#include "kiln/loss.hpp"
#include "kiln/norm.hpp"
#include "kiln/npy.hpp"
#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"
