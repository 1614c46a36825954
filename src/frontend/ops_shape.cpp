// Shape ops. transpose, permute, slice, expand, unsqueeze, squeeze and reshape are views (reshape
// where the strides allow one, as PyTorch's: splitting a dim and merging dims that are laid out
// as one); a reshape no strides can express, and cat, copy.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

#include "core/checked.hpp"
#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

// The strides that show x's elements, in row-major order, as `shape` (of the same count), if any:
// x's dims fall into runs that are laid out as one (each dim's stride its inner neighbour's times
// that extent), and each run must split into whole dims of `shape` (PyTorch's computeStride).
std::optional<Dims> view_strides(const TensorImpl& x, const Dims& shape) {
  if (x.numel() == 0 || x.is_contiguous()) return contiguous_strides(shape);
  const Dims &old = x.shape, &old_strides = x.strides;
  Dims strides(shape.size());
  auto view_d = static_cast<std::ptrdiff_t>(shape.size()) - 1;
  std::int64_t base = old_strides.back(), run = 1, view_run = 1;
  for (auto d = static_cast<std::ptrdiff_t>(old.size()) - 1; d >= 0; --d) {
    run *= old[static_cast<std::size_t>(d)];
    const bool run_ends = d == 0 || (old[static_cast<std::size_t>(d) - 1] != 1 &&
                                     old_strides[static_cast<std::size_t>(d) - 1] != run * base);
    if (!run_ends) continue;
    while (view_d >= 0 && (view_run < run || shape[static_cast<std::size_t>(view_d)] == 1)) {
      strides[static_cast<std::size_t>(view_d)] = view_run * base;
      view_run *= shape[static_cast<std::size_t>(view_d)];
      --view_d;
    }
    if (view_run != run) return std::nullopt;
    if (d > 0) {
      base = old_strides[static_cast<std::size_t>(d) - 1];
      run = view_run = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

}  // namespace

Handle reshape(const Handle& x, const Dims& shape) {
  Dims target = shape;
  auto infer = std::find(target.begin(), target.end(), -1);
  if (std::count(target.begin(), target.end(), -1) > 1) {
    throw ShapeError(fmt::format("reshape: more than one -1 in {}", format_dims(shape)));
  }
  for (auto e : target) {
    if (e < -1)
      throw ShapeError(fmt::format("reshape: negative dimension {} in {}", e, format_dims(shape)));
  }
  if (infer != target.end()) {
    *infer = 1;
    const std::int64_t known = checked_numel("reshape", target);
    if (known == 0)
      throw ShapeError(
          fmt::format("reshape: cannot infer -1 in {} for zero elements", format_dims(shape)));
    *infer = x->numel() / known;
  }
  if (checked_numel("reshape", target) != x->numel()) {
    throw ShapeError(fmt::format("reshape: cannot reshape {} ({} elements) to {}",
                                 format_dims(x->shape), x->numel(), format_dims(shape)));
  }
  if (std::optional<Dims> strides = view_strides(*x, target))
    return view(*x, target, *strides, x->offset);
  Handle c = contiguous(x);
  return view(*c, target, contiguous_strides(target), c->offset);
}

Handle transpose(const Handle& x, int d0, int d1) {
  Dims shape = x->shape, strides = x->strides;
  std::swap(shape[d0], shape[d1]);
  std::swap(strides[d0], strides[d1]);
  return view(*x, shape, strides, x->offset);
}

Handle permute(const Handle& x, std::span<const int> order) {
  const int r = x->rank();
  std::vector<bool> seen(r, false);
  Dims shape(r), strides(r);
  for (int i = 0; i < r; ++i) {
    int d = order[i] < 0 ? order[i] + r : order[i];
    if (d < 0 || d >= r || seen[d]) {
      throw ValueError(
          fmt::format("permute: [{}] is not a permutation of {} dims", fmt::join(order, ", "), r));
    }
    seen[d] = true;
    shape[i] = x->shape[d];
    strides[i] = x->strides[d];
  }
  return view(*x, shape, strides, x->offset);
}

Handle slice(const Handle& x, int dim, std::int64_t start, std::int64_t stop, std::int64_t step) {
  if (step <= 0) throw ValueError(fmt::format("slice: step must be positive, got {}", step));
  // Python's rules: negative bounds count from the end, then clamp to [0, size].
  const std::int64_t n = x->shape[dim];
  auto clampi = [n](std::int64_t i) { return std::clamp(i < 0 ? i + n : i, std::int64_t{0}, n); };
  start = clampi(start);
  stop = clampi(stop);
  // ceil((stop - start) / step), written so that no step can overflow it.
  const std::int64_t len = stop > start ? 1 + (stop - start - 1) / step : 0;
  Dims shape = x->shape, strides = x->strides;
  shape[dim] = len;
  // Two or more elements mean step < n, so the new stride stays within the buffer; with fewer
  // the stride is never used and keeps its old value rather than overflow.
  if (len > 1) strides[dim] *= step;
  return view(*x, shape, strides, x->offset + (len > 0 ? start * x->strides[dim] : 0));
}

Handle unsqueeze(const Handle& x, int dim) {
  Dims shape = x->shape, strides = x->strides;
  // Any stride serves a size-1 dim: row-major's where it fits int64, else 1.
  std::int64_t stride = 1;
  if (dim < x->rank() && !mul_fits(x->shape[dim], x->strides[dim], &stride)) stride = 1;
  shape.insert(shape.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  return view(*x, shape, strides, x->offset);
}

Handle squeeze(const Handle& x, int dim) {
  if (x->shape[dim] != 1) {
    throw ShapeError(fmt::format("squeeze: dim {} of {} has size {}, not 1", dim,
                                 format_dims(x->shape), x->shape[dim]));
  }
  Dims shape = x->shape, strides = x->strides;
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  return view(*x, shape, strides, x->offset);
}

Handle expand(const Handle& x, const Dims& shape) {
  const std::size_t lead = shape.size() - x->shape.size();
  Dims target = shape;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    std::int64_t have = i < lead ? 1 : x->shape[i - lead];
    if (shape[i] == -1 && i >= lead) target[i] = have;
    if (target[i] != have && have != 1) {
      throw ShapeError(
          fmt::format("expand: cannot expand {} to {}", format_dims(x->shape), format_dims(shape)));
    }
    if (target[i] < 0)
      throw ShapeError(fmt::format("expand: negative dimension in {}", format_dims(shape)));
  }
  checked_numel("expand", target);
  TensorImpl v = broadcast_to(*x, target);
  return view(*x, v.shape, v.strides, x->offset);
}

Handle cat(std::span<const Handle> xs, int dim) {
  if (xs.empty()) throw ValueError("cat: needs at least one tensor");
  const Handle& first = xs[0];
  Dims shape = first->shape;
  shape[dim] = 0;
  for (const Handle& x : xs) {
    common_device("cat", {&first, &x});
    if (x->dtype != first->dtype) {
      throw DTypeError(fmt::format("cat: dtypes differ: {} and {}", dtype_name(first->dtype),
                                   dtype_name(x->dtype)));
    }
    for (int d = 0; d < first->rank(); ++d) {
      if (d != dim && x->shape[d] != first->shape[d]) {
        throw ShapeError(fmt::format("cat: shapes {} and {} differ outside dim {}",
                                     format_dims(first->shape), format_dims(x->shape), dim));
      }
    }
    if (!add_fits(shape[dim], x->shape[dim], &shape[dim])) {
      throw ShapeError(fmt::format("cat: the extents along dim {} add up past int64 (at {})", dim,
                                   format_dims(x->shape)));
    }
  }
  Backend& be = backend_of(first->device);
  Handle out = allocate("cat", be, shape, first->dtype);
  ir::Program copy;
  copy.output(copy.input(first->dtype));
  std::int64_t at = 0;
  for (const Handle& x : xs) {
    Handle part = slice(out, dim, at, at + x->shape[dim], 1);
    at += x->shape[dim];
    const TensorImpl* in[] = {x.get()};
    const TensorImpl* outs[] = {part.get()};
    be.elementwise(copy, in, {}, detail::Outs(outs));
  }
  return out;
}

}  // namespace kiln::detail
