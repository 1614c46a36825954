// NumPy's .npy files: kiln::save_npy writes the bytes numpy.save writes for the same array
// (format 1.0, its header padding included); kiln::load_npy<D> reads what numpy.save writes.
//
// dtypes: f32 <-> '<f4', i32 <-> '<i4', f16 <-> '<f2', bool <-> '|b1'. NumPy has no bfloat16, so
// saving bf16 is a DTypeError (save x.to(DType::f32)). Loading also takes NumPy's defaults,
// '<f8' (read as f32, rounded) and '<i8' (read as i32; a value out of its range is a
// ValueError), and Fortran-ordered arrays. A malformed file is a ValueError naming it.
#pragma once

#include <cstddef>
#include <filesystem>

#include "kiln/device.hpp"
#include "kiln/tensor.hpp"

namespace kiln {
namespace detail {
void save_npy(const std::filesystem::path& path, const Handle& t);
Handle load_npy(const std::filesystem::path& path, Device device);
}  // namespace detail

template <std::size_t D>
void save_npy(const std::filesystem::path& path, const Tensor<D>& t) {
  detail::save_npy(path, t.handle("save_npy"));
}

// The array in `path` as a Tensor<D> on `device`; ShapeError when its rank is not D.
template <std::size_t D>
Tensor<D> load_npy(const std::filesystem::path& path, Device device = Device::cpu()) {
  return Tensor<D>(detail::load_npy(path, device));
}

}  // namespace kiln
