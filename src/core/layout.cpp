// Shapes and strides: element counts, row-major strides, contiguity, and their checked forms;
// coalescing (core/layout.hpp).
#include "core/layout.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

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

bool dense_strides(const Dims& shape, const Dims& strides) {
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (stride, extent), extents > 1
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return true;
    if (shape[d] > 1) dims.emplace_back(strides[d], shape[d]);
  }
  std::sort(dims.begin(), dims.end());
  std::int64_t step = 1;
  for (const auto& [stride, extent] : dims) {
    if (stride != step) return false;
    step *= extent;
  }
  return true;
}

bool TensorImpl::is_dense() const { return dense_strides(shape, strides); }

namespace {

// Appends dim d (of extent n) to l: merged into l's last dim where every operand's last stride
// is its stride at d times n, else as a new dim. An extent-1 dim never moves and is dropped.
void append_dim(JointLayout& l, std::span<const Dims* const> strides, std::size_t d,
                std::int64_t n) {
  l.numel *= n;
  if (n == 1) return;
  bool merge = !l.shape.empty();
  for (std::size_t k = 0; merge && k < strides.size(); ++k)
    merge = l.strides[k].back() == (*strides[k])[d] * n;
  if (merge) {
    l.shape.back() *= n;
    for (std::size_t k = 0; k < strides.size(); ++k) l.strides[k].back() = (*strides[k])[d];
  } else {
    l.shape.push_back(n);
    for (std::size_t k = 0; k < strides.size(); ++k) l.strides[k].push_back((*strides[k])[d]);
  }
}

void reset(JointLayout& l, std::size_t operands) {
  l.shape.clear();
  l.strides.resize(operands);
  for (Dims& s : l.strides) s.clear();
  l.numel = 1;
}

Layout only_operand(JointLayout&& j) {
  return {std::move(j.shape), std::move(j.strides[0]), j.numel};
}

}  // namespace

void coalesce(const Dims& shape, std::span<const Dims* const> strides, JointLayout& out) {
  reset(out, strides.size());
  for (std::size_t d = 0; d < shape.size(); ++d) append_dim(out, strides, d, shape[d]);
}

JointLayout coalesce(const Dims& shape, std::span<const Dims* const> strides) {
  JointLayout l;
  coalesce(shape, strides, l);
  return l;
}

JointLayout coalesce_dims(const Dims& shape, std::span<const Dims* const> strides,
                          std::span<const int> dims) {
  JointLayout l;
  reset(l, strides.size());
  for (int d : dims) append_dim(l, strides, static_cast<std::size_t>(d), shape[d]);
  return l;
}

Layout coalesce(const Dims& shape, const Dims& strides) {
  const Dims* one[] = {&strides};
  return only_operand(coalesce(shape, one));
}

Layout memory_order(const Dims& shape, const Dims& strides) {
  std::vector<std::size_t> order(shape.size());
  for (std::size_t d = 0; d < order.size(); ++d) order[d] = d;
  auto key = [&](std::size_t d) {
    return strides[d] == 0 ? std::numeric_limits<std::int64_t>::max()
                           : (strides[d] < 0 ? -strides[d] : strides[d]);
  };
  // Stable: dims of equal stride (size-1 dims, broadcast dims) keep their row-major order.
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return key(a) > key(b); });
  Dims s, st;
  for (std::size_t d : order) s.push_back(shape[d]), st.push_back(strides[d]);
  return coalesce(s, st);
}

ReductionDims reduction_dims(int rank, int dim) {
  ReductionDims r;
  for (int d = 0; d < rank; ++d) (dim < 0 || d == dim ? r.reduced : r.kept).push_back(d);
  return r;
}

ReductionLayout reduction_layout(const Dims& shape, const Dims& strides, int dim, bool row_major) {
  ReductionLayout l;
  if (dim < 0) {
    l.red = row_major ? coalesce(shape, strides) : memory_order(shape, strides);
    return l;
  }
  const ReductionDims dims = reduction_dims(static_cast<int>(shape.size()), dim);
  const Dims* one[] = {&strides};
  l.kept = only_operand(coalesce_dims(shape, one, dims.kept));
  l.red = only_operand(coalesce_dims(shape, one, dims.reduced));
  return l;
}

}  // namespace detail
}  // namespace kiln
