// Shapes and strides: element counts, row-major strides, contiguity.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/tensor_impl.hpp"

namespace kiln {

std::string format_dims(const Dims& d) { return fmt::format("[{}]", fmt::join(d, ", ")); }

namespace detail {

std::int64_t numel(const Dims& shape) {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return n;
}

Dims contiguous_strides(const Dims& shape) {
  Dims s(shape.size());
  std::int64_t step = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = step;
    step *= shape[i];
  }
  return s;
}

std::int64_t TensorImpl::numel() const { return detail::numel(shape); }

bool TensorImpl::is_contiguous() const {
  std::int64_t step = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != step) return false;
    step *= shape[i];
  }
  return true;
}

}  // namespace detail
}  // namespace kiln
