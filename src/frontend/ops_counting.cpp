// randperm and bincount, composed from the order family and the index family.
//
// randperm(n, seed): a stable argsort of n random 31-bit i32 keys, each made of two Philox
// uniforms (15 bits of one, 16 of the other; the uniforms are exact multiples of 2^-24, so the
// products are exact and the keys identical on every device). Equal keys (about n^2 / 2^32 pairs:
// some 1e4 at n = 1e7) keep their index order, a bias far below anything a shuffle notices.
// bincount(ids, minlength): index_add of ones into zeros, after one read-back of min and max of
// the ids (the result's length depends on them, as in PyTorch).
#include <fmt/format.h>

#include <limits>

#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {

Handle randperm(std::int64_t n, std::uint64_t seed, Device device) {
  if (n < 0 || n > std::numeric_limits<std::int32_t>::max()) {
    throw ValueError(fmt::format("randperm: n = {} is outside [0, 2^31 - 1]", n));
  }
  const Handle u = random({2, n}, Distribution::uniform(), device, seed, DType::f32);
  auto bits = [&](int row, double scale) {
    return cast(binary(Binary::mul, slice(u, 0, row, row + 1, 1), Scalar{scale, false}),
                DType::i32);
  };
  const Handle keys = binary(
      Binary::add, binary(Binary::mul, bits(0, 32768.0), Scalar{65536, true}), bits(1, 65536.0));
  return reshape(sort(keys, 1, false).indices, {n});
}

Handle bincount(const Handle& ids, std::int64_t minlength) {
  if (ids->dtype != DType::i32) {
    throw DTypeError(fmt::format("bincount: ids must be i32, got {}", dtype_name(ids->dtype)));
  }
  if (ids->rank() != 1) {
    throw ShapeError(
        fmt::format("bincount: ids must have rank 1, got {}", format_dims(ids->shape)));
  }
  if (minlength < 0) throw ValueError(fmt::format("bincount: minlength = {} < 0", minlength));
  std::int64_t length = minlength;
  if (ids->numel() > 0) {
    std::int32_t lo = 0, hi = 0;
    read(reduce_all(Reduction::min, ids), &lo, DType::i32);
    read(reduce_all(Reduction::max, ids), &hi, DType::i32);
    if (lo < 0) throw ValueError(fmt::format("bincount: ids must be >= 0, got {}", lo));
    length = std::max<std::int64_t>(length, std::int64_t{hi} + 1);
  }
  const Handle zeros = full({length}, Scalar{0, true}, DType::i32, ids->device);
  if (ids->numel() == 0) return zeros;
  const Handle ones = full({ids->shape[0]}, Scalar{1, true}, DType::i32, ids->device);
  return index_add(zeros, 0, ids, ones);
}

}  // namespace kiln::detail
