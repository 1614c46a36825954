// Checked arithmetic on extents, strides, offsets and byte counts.
//
// Shapes come from the user as int64 values, and their products (element counts, row-major
// strides, byte counts) can wrap. The front end checks every shape an op is about to create with
// checked_numel/checked_bytes, naming the op; code below the front end may then multiply extents
// of a tensor freely, because every tensor it sees was made from a checked shape: its element
// count, its contiguous strides and its byte count all fit int64.
#pragma once

#include <cstdint>

#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"

namespace kiln::detail {

// a * b and a + b, or false when the result does not fit int64.
inline bool mul_fits(std::int64_t a, std::int64_t b, std::int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
inline bool add_fits(std::int64_t a, std::int64_t b, std::int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

// The element count of `shape`. Throws ShapeError naming `op` and the shape when an extent is
// negative, or when the product of its extents (zero extents counted as 1, so that the row-major
// strides of an empty tensor fit as well) overflows int64.
std::int64_t checked_numel(const char* op, const Dims& shape);
// The bytes a contiguous `dtype` tensor of `shape` takes; ShapeError as checked_numel, and when
// that count overflows int64.
std::int64_t checked_bytes(const char* op, const Dims& shape, DType dtype);

}  // namespace kiln::detail
