// repeat and pad: results larger than their input, each element written once.
//
// repeat is one copy of a stride-0 view: x of shape [s0, s1] seen as [t0, s0, t1, s1] with
// stride 0 on each t dim, copied densely and read back as [t0 * s0, t1 * s1]. An element-wise
// copy, so it records (and fuses) like one.
//
// pad writes slices of its result, as cat does: the input (cropped where a pad is negative) into
// the interior, and the constant into each border slab. The slabs and the interior are disjoint,
// so no element is written twice and the order of the writes does not matter. Like cat, it runs
// eagerly under fusion (it writes slices of its result).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/checked.hpp"
#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {

Handle repeat(const Handle& x, std::span<const std::int64_t> times) {
  const std::size_t rank = times.size();
  if (rank < static_cast<std::size_t>(x->rank())) {
    throw ValueError(
        fmt::format("repeat: {} repeat counts [{}] for a tensor of rank {}; give at "
                    "least one per dim",
                    rank, fmt::join(times, ", "), x->rank()));
  }
  // torch.Tensor.repeat: more counts than dims add leading dims of size 1 first.
  const std::size_t lead = rank - static_cast<std::size_t>(x->rank());
  Dims wide, wide_strides, shape(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    if (times[i] < 0) {
      throw ValueError(
          fmt::format("repeat: counts must be non-negative, got [{}]", fmt::join(times, ", ")));
    }
    const std::int64_t extent = i < lead ? 1 : x->shape[i - lead];
    const std::int64_t stride = i < lead ? 0 : x->strides[i - lead];
    wide.insert(wide.end(), {times[i], extent});
    wide_strides.insert(wide_strides.end(), {0, stride});
    if (!mul_fits(times[i], extent, &shape[i])) {
      throw ShapeError(fmt::format("repeat: {} repeats of dim {} (size {}) overflow int64",
                                   times[i], i, extent));
    }
  }
  checked_numel("repeat", shape);
  Handle tiled = view(*x, wide, wide_strides, x->offset);
  ir::Program copy;
  copy.output(copy.input(x->dtype));
  Handle dense =
      run_elementwise1("repeat", copy, std::span<const Handle>(&tiled, 1), {}, wide, x->device);
  return view(*dense, shape, contiguous_strides(shape), dense->offset);
}

Handle pad(const Handle& x, std::span<const std::int64_t> pads, Scalar value) {
  const int rank = x->rank();
  if (pads.size() % 2 != 0 || pads.size() > 2 * static_cast<std::size_t>(rank)) {
    throw ValueError(
        fmt::format("pad: [{}] must be (left, right) pairs, at most one per dim of "
                    "{} (rank {})",
                    fmt::join(pads, ", "), format_dims(x->shape), rank));
  }
  // F.pad's order: the first pair pads the last dim, the next the one before it, ...
  Dims before(rank, 0), after(rank, 0);
  for (std::size_t j = 0; j < pads.size() / 2; ++j) {
    before[rank - 1 - j] = pads[2 * j];
    after[rank - 1 - j] = pads[2 * j + 1];
  }
  // A negative pad crops, as in F.pad: slice those elements off the input first.
  Handle src = x;
  Dims shape = x->shape;
  for (int d = 0; d < rank; ++d) {
    const std::int64_t n = x->shape[d];
    const std::int64_t crop_l = before[d] < 0 ? -before[d] : 0;
    const std::int64_t crop_r = after[d] < 0 ? -after[d] : 0;
    std::int64_t grow = 0;
    if (crop_l > n || crop_r > n - crop_l ||
        !add_fits(std::max<std::int64_t>(before[d], 0), std::max<std::int64_t>(after[d], 0),
                  &grow) ||
        !add_fits(n - crop_l - crop_r, grow, &shape[d])) {
      throw ValueError(fmt::format("pad: [{}] gives dim {} of {} a negative or overflowing size",
                                   fmt::join(pads, ", "), d, format_dims(x->shape)));
    }
    if (crop_l > 0 || crop_r > 0) src = slice(src, d, crop_l, n - crop_r, 1);
    before[d] = std::max<std::int64_t>(before[d], 0);
  }
  Backend& be = backend_of(x->device);
  Handle out = allocate("pad", be, shape, x->dtype);
  const double v = scalar_for("pad", value.value, x->dtype);

  // Interior: the (cropped) input.
  Handle interior = out;
  for (int d = 0; d < rank; ++d)
    interior = slice(interior, d, before[d], before[d] + src->shape[d], 1);
  ir::Program copy;
  copy.output(copy.input(x->dtype));
  const TensorImpl* in[] = {src.get()};
  const TensorImpl* inner[] = {interior.get()};
  if (interior->numel() > 0) be.elementwise(copy, in, {}, detail::Outs(inner));

  // Borders: for each dim d, the slabs before and after the interior along d, within the
  // interior's range on the dims before d and whole on the dims after it.
  ir::Program fill;
  fill.output(fill.scalar(x->dtype));
  Handle prefix = out;  // out restricted to the interior on dims < d
  for (int d = 0; d < rank; ++d) {
    const std::int64_t stop = before[d] + src->shape[d];
    for (Handle slab : {slice(prefix, d, 0, before[d], 1), slice(prefix, d, stop, shape[d], 1)}) {
      if (slab->numel() == 0) continue;
      const TensorImpl* outs[] = {slab.get()};
      be.elementwise(fill, {}, std::span<const double>(&v, 1), detail::Outs(outs));
    }
    prefix = slice(prefix, d, before[d], stop, 1);
  }
  return out;
}

}  // namespace kiln::detail
