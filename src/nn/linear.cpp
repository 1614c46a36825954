// Linear's construction and input check (include/kiln/nn/linear.hpp).
#include "kiln/nn/linear.hpp"

#include <fmt/format.h>

#include <cmath>

#include "kiln/nn/init.hpp"

namespace kiln::nn {

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool has_bias)
    : in_(in_features), out_(out_features) {
  if (in_features <= 0 || out_features <= 0)
    throw ValueError(fmt::format("Linear: features must be positive, got in {} out {}", in_features,
                                 out_features));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  const auto init = Distribution::uniform(-bound, bound);
  weight = Parameter<2>(Tensor<2>::random({out_, in_}, init, Device::cpu(), next_seed()));
  register_parameter("weight", weight);
  if (has_bias) bias = Parameter<1>(Tensor<1>::random({out_}, init, Device::cpu(), next_seed()));
  register_parameter("bias", bias);
}

void Linear::check(std::int64_t last, DType dtype) const {
  if (last != in_)
    throw ShapeError(fmt::format("Linear: input's last dim is {}, in_features {}", last, in_));
  if (!is_floating(dtype))
    throw DTypeError(fmt::format("Linear: input must be floating, got {}", dtype_name(dtype)));
}

}  // namespace kiln::nn
