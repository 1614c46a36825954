// split and chunk (views: slices of the input, no copy) and stack (unsqueeze each, then cat).
// Dims are already normalised by the caller.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/checked.hpp"
#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {

std::vector<Handle> split(const Handle& x, std::int64_t size, int dim) {
  if (size <= 0)
    throw ValueError(fmt::format("split: the split size must be positive, got {}", size));
  const std::int64_t n = x->shape[dim];
  // As torch.split: pieces of `size`, the last one shorter; an empty dim gives one empty piece.
  std::vector<Handle> out;
  if (n == 0) out.push_back(slice(x, dim, 0, 0, 1));
  for (std::int64_t at = 0; at < n; at += std::min(size, n - at))
    out.push_back(slice(x, dim, at, at + std::min(size, n - at), 1));
  return out;
}

std::vector<Handle> split(const Handle& x, std::span<const std::int64_t> sizes, int dim) {
  // As torch.split with a list of sizes: every size >= 0, and they add up to the dim's extent.
  std::int64_t total = 0;
  for (std::int64_t s : sizes) {
    if (s < 0 || !add_fits(total, s, &total)) {
      throw ValueError(
          fmt::format("split: sizes [{}] must be non-negative and add up to {}, the "
                      "size of dim {} of {}",
                      fmt::join(sizes, ", "), x->shape[dim], dim, format_dims(x->shape)));
    }
  }
  if (total != x->shape[dim]) {
    throw ValueError(fmt::format("split: sizes [{}] add up to {}, but dim {} of {} has size {}",
                                 fmt::join(sizes, ", "), total, dim, format_dims(x->shape),
                                 x->shape[dim]));
  }
  std::vector<Handle> out;
  out.reserve(sizes.size());
  std::int64_t at = 0;
  for (std::int64_t s : sizes) {
    out.push_back(slice(x, dim, at, at + s, 1));
    at += s;
  }
  return out;
}

std::vector<Handle> chunk(const Handle& x, std::int64_t chunks, int dim) {
  if (chunks <= 0)
    throw ValueError(fmt::format("chunk: the number of chunks must be positive, got {}", chunks));
  // torch.chunk: pieces of ceil(n / chunks), so there may be fewer than `chunks` of them (5 in 4
  // chunks gives 2, 2, 1), and an empty dim gives one empty piece.
  const std::int64_t n = x->shape[dim];
  const std::int64_t size = n == 0 ? 1 : 1 + (n - 1) / chunks;
  return split(x, size, dim);
}

Handle stack(std::span<const Handle> xs, int dim) {
  if (xs.empty()) throw ValueError("stack: needs at least one tensor");
  const Handle& first = xs[0];
  for (const Handle& x : xs) {
    common_device("stack", {&first, &x});
    if (x->dtype != first->dtype) {
      throw DTypeError(fmt::format("stack: dtypes differ: {} and {}", dtype_name(first->dtype),
                                   dtype_name(x->dtype)));
    }
    if (x->shape != first->shape) {
      throw ShapeError(fmt::format("stack: every tensor must have the same shape, got {} and {}",
                                   format_dims(first->shape), format_dims(x->shape)));
    }
  }
  std::vector<Handle> parts;
  parts.reserve(xs.size());
  for (const Handle& x : xs) parts.push_back(unsqueeze(x, dim));
  return cat(parts, dim);
}

}  // namespace kiln::detail
