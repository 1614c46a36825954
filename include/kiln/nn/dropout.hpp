// kiln::nn::Dropout, as torch.nn.Dropout: in training each element is zeroed with probability p
// and the rest scaled by 1 / (1 - p); in eval() (and for p = 0) it is the identity. Composed from
// a uniform random tensor with a fresh seed per call (kiln/nn/init.hpp), a comparison and a
// where, all element-wise, so the fusion decorator makes it one kernel with its neighbours; a
// dedicated dropout op can replace forward's body later.
#pragma once

#include "kiln/nn/init.hpp"
#include "kiln/nn/module.hpp"

namespace kiln::nn {

// The dropout of x with probability p (ValueError outside [0, 1]) drawn from `seed`.
template <std::size_t D>
Tensor<D> dropout(const Tensor<D>& x, double p, std::uint64_t seed) {
  if (!(p >= 0.0 && p <= 1.0))
    throw ValueError("dropout: p must be in [0, 1], got " + std::to_string(p));
  if (p == 0.0) return x;
  if (p == 1.0) return x * 0.0f;
  const auto u = Tensor<D>::random(x.shape(), Distribution::uniform(), x.device(), seed);
  return where(u >= static_cast<float>(p), x * static_cast<float>(1.0 / (1.0 - p)), 0.0f)
      .to(x.dtype());
}

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  double p() const { return p_; }

  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    if (!is_training() || p_ == 0.0) return x;
    return dropout(x, p_, next_seed());
  }
  template <std::size_t D>
  Tensor<D> operator()(const Tensor<D>& x) const {
    return forward(x);
  }

 private:
  double p_;
};

}  // namespace kiln::nn
