// Masks: tril, triu and masked_fill, each one element-wise program ending in a `where`, so each
// records (and fuses) like any element-wise op and runs on every backend that runs `where`.
//
// The IR has no integer division or remainder, so a program cannot turn its element's linear
// index into a row and a column. tril/triu read them instead from two small i32 inputs built by
// arange, a column [R, 1] of row numbers and a row [C] of column numbers, which the program
// broadcasts against x like any other operand (stride 0): no gather, and under fusion the two
// aranges join the same group.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

// The largest extent an i32 arange of indices can cover (arange's own limit).
constexpr std::int64_t kMaxIndex = std::numeric_limits<std::int32_t>::max();

}  // namespace

Handle triangle(const Handle& x, std::int64_t offset, bool lower) {
  const char* op = lower ? "tril" : "triu";
  if (x->rank() < 2) {
    throw ShapeError(fmt::format("{}: needs a tensor of rank 2 or more, got shape {}", op,
                                 format_dims(x->shape)));
  }
  const std::int64_t rows = x->shape[x->rank() - 2], cols = x->shape[x->rank() - 1];
  if (rows > kMaxIndex || cols > kMaxIndex) {
    throw ShapeError(
        fmt::format("{}: the last two dims of {} exceed 2^31 - 1, the limit of its "
                    "i32 row and column indices",
                    op, format_dims(x->shape)));
  }
  // col - row lies in [-(rows - 1), cols - 1]: an offset beyond [-rows, cols] selects the same
  // elements as that bound, and clamping it keeps the i32 parameter exact.
  const auto k = static_cast<double>(std::clamp(offset, -rows, cols));
  Handle r = arange(0, static_cast<double>(rows), 1, DType::i32, x->device);
  r = view(*r, {rows, 1}, {1, 1}, r->offset);
  Handle c = arange(0, static_cast<double>(cols), 1, DType::i32, x->device);

  ir::Program p;
  const std::int32_t in = p.input(x->dtype);
  const std::int32_t col = p.input(DType::i32);  // one statement each: slots in `inputs` order
  const std::int32_t row = p.input(DType::i32);
  const std::int32_t diff = p.binary(ir::Op::sub, col, row);
  // tril keeps col - row <= offset, triu keeps col - row >= offset (torch.tril, torch.triu).
  const std::int32_t keep = p.binary(lower ? ir::Op::le : ir::Op::ge, diff, p.scalar(DType::i32));
  p.output(p.where(keep, in, p.scalar(x->dtype)));
  const Handle inputs[] = {x, c, r};
  const double scalars[] = {k, 0.0};
  return run_elementwise1(op, p, inputs, scalars, x->shape, x->device);
}

Handle masked_fill(const Handle& x, const Handle& mask, Scalar value) {
  common_device("masked_fill", {&x, &mask});
  if (mask->dtype != DType::boolean) {
    throw DTypeError(
        fmt::format("masked_fill: the mask must be bool, got {}", dtype_name(mask->dtype)));
  }
  // The mask broadcasts to x, never x to the mask (torch.Tensor.masked_fill): the result keeps
  // x's shape.
  if (mask->rank() > x->rank() ||
      broadcast_shapes("masked_fill", x->shape, mask->shape) != x->shape) {
    throw ShapeError(fmt::format("masked_fill: a mask of shape {} does not broadcast to {}",
                                 format_dims(mask->shape), format_dims(x->shape)));
  }
  // The value takes x's dtype, as `full` converts it (PyTorch's rule too: the result keeps x's
  // dtype whatever the scalar).
  const double v = scalar_for("masked_fill", value.value, x->dtype);
  ir::Program p;
  const std::int32_t m = p.input(DType::boolean);
  const std::int32_t in = p.input(x->dtype);
  p.output(p.where(m, p.scalar(x->dtype), in));
  const Handle inputs[] = {mask, x};
  return run_elementwise1("masked_fill", p, inputs, std::span<const double>(&v, 1), x->shape,
                          x->device);
}

}  // namespace kiln::detail
