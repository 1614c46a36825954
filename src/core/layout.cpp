// Shapes and strides: element counts, row-major strides, contiguity, and their checked forms.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/checked.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/error.hpp"

namespace kiln {

std::string format_dims(const Dims& d) { return fmt::format("[{}]", fmt::join(d, ", ")); }

namespace detail {
namespace {

[[noreturn]] void overflow(const char* op, const Dims& shape, const std::string& what) {
  throw ShapeError(
      fmt::format("{}: the {} of shape {} overflows int64", op, what, format_dims(shape)));
}

}  // namespace

std::int64_t checked_numel(const char* op, const Dims& shape) {
  // The product is taken with zero extents counted as 1 (the largest row-major stride times the
  // first extent), so that the strides of an empty tensor fit as well.
  // A negative extent is reported before an overflow, wherever each stands.
  std::int64_t span = 1;
  bool empty = false, overflowed = false;
  for (auto e : shape) {
    if (e < 0) {
      throw ShapeError(fmt::format("{}: negative dimension {} in {}", op, e, format_dims(shape)));
    }
    empty = empty || e == 0;
    overflowed = overflowed || (e > 1 && !mul_fits(span, e, &span));
  }
  if (overflowed) overflow(op, shape, "element count");
  return empty ? 0 : span;
}

std::int64_t checked_bytes(const char* op, const Dims& shape, DType dtype) {
  std::int64_t bytes = 0;
  const std::int64_t n = checked_numel(op, shape);
  if (!mul_fits(n, static_cast<std::int64_t>(dtype_size(dtype)), &bytes)) {
    overflow(op, shape, fmt::format("byte count in {}", dtype_name(dtype)));
  }
  return bytes;
}

// The unchecked forms are for shapes of tensors that exist (made from checked shapes), so an
// overflow here is a front-end check missing: the same error, without an op.
std::int64_t numel(const Dims& shape) { return checked_numel("shape", shape); }

Dims contiguous_strides(const Dims& shape) {
  Dims s(shape.size());
  std::int64_t step = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = step;
    if (shape[i] > 1 && !mul_fits(step, shape[i], &step)) overflow("shape", shape, "strides");
  }
  return s;
}

std::int64_t TensorImpl::numel() const { return detail::numel(shape); }

bool TensorImpl::is_contiguous() const {
  // An empty tensor is contiguous whatever its strides, as in PyTorch: no element is addressed.
  bool dense = true;
  std::int64_t step = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 0) return true;
    if (shape[i] != 1 && strides[i] != step) dense = false;
    step *= shape[i];
  }
  return dense;
}

}  // namespace detail
}  // namespace kiln
