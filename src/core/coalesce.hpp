// Coalesced layouts of one strided tensor, shared by the CPU and CUDA reductions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "kiln/shape.hpp"

namespace kiln::detail {

// Dims in row-major order with size-1 dims dropped and mergeable neighbours merged: the same
// row-major sequence of elements with fewer, longer runs. A single element has rank 0.
struct Layout {
  Dims shape, strides;
  std::int64_t numel = 1;
};

inline Layout coalesce(const Dims& shape, const Dims& strides) {
  Layout l;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    l.numel *= shape[d];
    if (shape[d] == 1) continue;
    if (!l.shape.empty() && l.strides.back() == strides[d] * shape[d]) {
      l.shape.back() *= shape[d];
      l.strides.back() = strides[d];
    } else {
      l.shape.push_back(shape[d]);
      l.strides.push_back(strides[d]);
    }
  }
  return l;
}

// The same elements in the order that walks memory forward (dims sorted by decreasing stride,
// broadcast dims outermost), coalesced: for reductions whose result does not depend on the
// order, a transposed input then reads as fast as a contiguous one.
inline Layout memory_order(const Dims& shape, const Dims& strides) {
  std::vector<std::size_t> order(shape.size());
  for (std::size_t d = 0; d < order.size(); ++d) order[d] = d;
  auto key = [&](std::size_t d) {
    return strides[d] == 0 ? std::numeric_limits<std::int64_t>::max()
                           : (strides[d] < 0 ? -strides[d] : strides[d]);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return key(a) > key(b); });
  Dims s, st;
  for (std::size_t d : order) s.push_back(shape[d]), st.push_back(strides[d]);
  return coalesce(s, st);
}

}  // namespace kiln::detail
