// Walking a range of row-major element indices of a strided tensor as runs of one stride.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/shape.hpp"

namespace kiln::ir {

// The layout of every tensor of one element-wise call after merging dims that are
// mergeable in all of them (and dropping size-1 dims): most calls end up with rank 1.
struct CoalescedLayout {
  Dims shape;
  std::vector<Dims> strides;  // one per tensor
};

CoalescedLayout coalesce(const Dims& shape, const std::vector<const Dims*>& strides);

// Calls fn(element_offset, count, stride) for consecutive runs covering the row-major indices
// [start, start + len) of a tensor with this shape and these strides.
template <class Fn>
void for_each_run(const Dims& shape, const Dims& strides, std::int64_t start, std::int64_t len,
                  Fn&& fn) {
  const int r = static_cast<int>(shape.size());
  if (r == 0) {
    fn(std::int64_t{0}, len, std::int64_t{0});
    return;
  }
  std::int64_t idx[16];
  std::int64_t rem = start;
  std::int64_t offset = 0;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % shape[d];
    rem /= shape[d];
    offset += idx[d] * strides[d];
  }
  const std::int64_t inner = shape[r - 1];
  while (len > 0) {
    std::int64_t count = std::min(len, inner - idx[r - 1]);
    fn(offset, count, strides[r - 1]);
    len -= count;
    offset += count * strides[r - 1];
    idx[r - 1] += count;
    // Carry into the outer dims.
    for (int d = r - 1; d > 0 && idx[d] == shape[d]; --d) {
      offset -= shape[d] * strides[d];
      idx[d] = 0;
      ++idx[d - 1];
      offset += strides[d - 1];
    }
  }
}

}  // namespace kiln::ir
