// Sequential's forward at ranks 2 and 3 (include/kiln/nn/sequential.hpp).
#include "kiln/nn/sequential.hpp"

#include <fmt/format.h>

namespace kiln::nn {

Tensor<2> Sequential::forward(const Tensor<2>& x) const {
  Tensor<2> y = x;
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    if (!steps_[i].rank2)
      throw ShapeError(fmt::format("Sequential: module {} has no forward of a Tensor<2>", i));
    y = steps_[i].rank2(y);
  }
  return y;
}

Tensor<3> Sequential::forward(const Tensor<3>& x) const {
  Tensor<3> y = x;
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    if (!steps_[i].rank3)
      throw ShapeError(fmt::format("Sequential: module {} has no forward of a Tensor<3>", i));
    y = steps_[i].rank3(y);
  }
  return y;
}

}  // namespace kiln::nn
