// Where modules draw their random numbers: initial weights and dropout masks. One process-wide
// seed (manual_seed, as torch.manual_seed) and a counter: each draw takes the next seed, so a
// program that seeds, builds its model and trains in the same order gets the same numbers on
// every run and device (Philox, kiln::Tensor::random).
#pragma once
#include <cstdint>

#include "kiln/tensor.hpp"

namespace kiln::nn {

// Restarts the sequence of draws from `seed`.
void manual_seed(std::uint64_t seed);
// The seed of the next draw (advances the sequence).
std::uint64_t next_seed();

template <std::size_t D>
Tensor<D> normal(const Shape<D>& shape, double std, DType dtype = DType::f32,
                 Device device = Device::cpu()) {
  return Tensor<D>::random(shape, Distribution::normal(0.0, std), device, next_seed(), dtype);
}
template <std::size_t D>
Tensor<D> uniform(const Shape<D>& shape, double lo, double hi, DType dtype = DType::f32,
                  Device device = Device::cpu()) {
  return Tensor<D>::random(shape, Distribution::uniform(lo, hi), device, next_seed(), dtype);
}

}  // namespace kiln::nn
