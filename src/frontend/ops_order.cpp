// Order and scan along a dim: max/min with indices, sort, argsort, topk, cumsum; randperm and
// bincount composed from them. Each op brings x to a contiguous tensor whose last dim is the one
// ordered (a transpose and a copy where dim is not last, or x is not contiguous), makes one
// Backend::order call, and gives the results back as views with dim where the user had it. It
// reads whole rows, so under fusion it closes the open group.
#include <fmt/format.h>

#include <limits>

#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

void check_supported(const char* op, const Handle& x) {
  const DType operand[] = {x->dtype};
  if (!backend_of(x->device).supports(BackendOp::order, operand)) {
    throw DTypeError(
        fmt::format("{}: {} has no {} on {}", op, x->device.str(), op, dtype_name(x->dtype)));
  }
  if (x->rank() < 1) throw ShapeError(fmt::format("{}: x must have rank >= 1", op));
  if (x->shape[static_cast<std::size_t>(x->rank() - 1)] > std::numeric_limits<std::int32_t>::max())
    throw ValueError(fmt::format("{}: a dim of more than 2^31 - 1 elements has no i32 index", op));
}

// One Backend::order call along `dim`; results in x's layout (dim where it was).
ValuesIndices run(OrderOp op, const Handle& x, int dim, const OrderParams& p) {
  const char* name = order_op_name(op);
  const int last = x->rank() - 1;
  const Handle moved = dim == last ? x : transpose(x, dim, last);
  const Handle xc = contiguous(moved);
  Dims shape = xc->shape;
  shape.back() = order_out_length(op, p, shape.back());
  Backend& be = backend_of(x->device);
  ValuesIndices r;
  r.values = allocate(name, be, shape, order_values_dtype(op, x->dtype));
  if (order_op_has_indices(op)) r.indices = allocate(name, be, shape, DType::i32);
  if (r.values->numel() > 0) {
    std::optional<detail::Out> ix;
    if (r.indices) ix.emplace(*r.indices);
    be.order(op, *xc, p, detail::Out(*r.values), ix);
  }
  if (dim != last) {
    r.values = transpose(r.values, dim, last);
    if (r.indices) r.indices = transpose(r.indices, dim, last);
  }
  return r;
}

}  // namespace

ValuesIndices extreme_with_indices(const Handle& x, int dim, bool largest, bool keepdim) {
  const char* name = largest ? "max" : "min";
  check_supported(name, x);
  if (x->shape[dim] == 0 && x->numel() == 0) {
    Dims rest = x->shape;
    rest[dim] = 1;
    if (numel(rest) > 0)
      throw ValueError(fmt::format("{}: cannot reduce over zero elements (shape {}, dim {})", name,
                                   format_dims(x->shape), dim));
  }
  ValuesIndices r = run(largest ? OrderOp::max : OrderOp::min, x, dim, {});
  if (!keepdim) {
    r.values = squeeze(r.values, dim);
    r.indices = squeeze(r.indices, dim);
  }
  return r;
}

ValuesIndices sort(const Handle& x, int dim, bool descending) {
  check_supported("sort", x);
  OrderParams p;
  p.descending = descending;
  return run(OrderOp::sort, x, dim, p);
}

ValuesIndices topk(const Handle& x, std::int64_t k, int dim, bool largest) {
  check_supported("topk", x);
  if (k < 0 || k > x->shape[dim]) {
    throw ValueError(fmt::format("topk: k = {} is outside [0, {}] (the size of dim {} of {})", k,
                                 x->shape[dim], dim, format_dims(x->shape)));
  }
  OrderParams p;
  p.k = k;
  p.descending = largest;
  return run(OrderOp::topk, x, dim, p);
}

// On autocast's f32 list, as PyTorch's: a running sum in half precision loses its small terms.
Handle cumsum(const Handle& x_in, int dim) {
  const Handle x = autocast_f32(x_in);
  check_supported("cumsum", x);
  return run(OrderOp::cumsum, x, dim, {}).values;
}

}  // namespace kiln::detail
