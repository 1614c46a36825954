// Printing tensors as PyTorch prints them, with kiln's shape, dtype and device after the values:
//
//   tensor([[ 1.0000, -2.5000],
//           [ 3.0000,  4.0000]], shape=[2, 2], dtype=f32, device=cpu)
//
// Columns are aligned; f32 has 4 decimals, or scientific notation when the values' magnitudes
// call for it (a nonzero |x| below 1e-4 or above 1e8, or a largest-to-smallest ratio above
// 1000); i32 prints integers, bool true/false. A tensor of more than 1000 elements prints the
// first and last 3 entries of each dim longer than 6, with `...` between, and only those entries
// are read back from the device. Printing waits for the device, as to_vector does. A placeholder
// (a default-constructed Tensor) prints as `tensor(undefined, Tensor<2>)`.
#pragma once

#include <ostream>
#include <string>

#include "kiln/tensor.hpp"

namespace kiln {

namespace detail {
std::string format_tensor(const Handle& t);
}  // namespace detail

template <std::size_t D>
std::string format(const Tensor<D>& t) {
  if (!t.defined()) return "tensor(undefined, Tensor<" + std::to_string(D) + ">)";
  return detail::format_tensor(t.handle());
}

template <std::size_t D>
std::ostream& operator<<(std::ostream& os, const Tensor<D>& t) {
  return os << format(t);
}

}  // namespace kiln
