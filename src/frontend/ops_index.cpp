// Indexing: gather, index_select, scatter_add, index_add, and one_hot and embedding built on them.
// Each checks shapes and dtypes as PyTorch does, brings its operands to the contiguous [O, N, I]
// form Backend::index takes (src/backend/backend.hpp), and makes one backend call: it reads and
// writes memory, so under fusion it closes the open group. Index values are checked by the
// backend as it reads them (at once on the CPU, at the next sync or read on CUDA).
#include <fmt/format.h>

#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

void check_operands(const char* op, const Handle& x, const Handle& index, const Handle* src) {
  if (src) {
    common_device(op, {&x, &index, src});
  } else {
    common_device(op, {&x, &index});
  }
  if (index->dtype != DType::i32) {
    throw DTypeError(fmt::format("{}: index must be i32, got {}", op, dtype_name(index->dtype)));
  }
  if (src && (*src)->dtype != x->dtype) {
    throw DTypeError(fmt::format("{}: src is {} but x is {}", op, dtype_name((*src)->dtype),
                                 dtype_name(x->dtype)));
  }
  if (src && x->dtype == DType::boolean) {
    throw DTypeError(fmt::format("{}: bool has no addition; cast to i32 first", op));
  }
  const DType operand[] = {x->dtype};
  if (!backend_of(x->device).supports(BackendOp::index, operand)) {
    throw DTypeError(
        fmt::format("{}: {} has no {} on {}", op, x->device.str(), dtype_name(x->dtype), op));
  }
}

// t narrowed to `extents` in every dim but `dim` (a view).
Handle narrow_to(const Handle& t, int dim, const Dims& extents) {
  Handle v = t;
  for (int d = 0; d < t->rank(); ++d)
    if (d != dim && extents[d] != t->shape[d]) v = slice(v, d, 0, extents[d], 1);
  return v;
}

// One backend call into a new tensor of `shape`.
Handle run(const char* op, IndexOp kind, const Handle& x, int dim, const Handle& index,
           const Handle* src, const Dims& shape) {
  Backend& be = backend_of(x->device);
  Handle out = allocate(op, be, shape, x->dtype);
  if (out->numel() == 0) return out;
  const Handle xc = contiguous(x), ic = contiguous(index);
  const Handle sc = src ? contiguous(*src) : nullptr;
  be.index(kind, *xc, dim, *ic, sc.get(), detail::Out(*out));
  return out;
}

// The per-element ops' rule (torch.gather, torch.Tensor.scatter_add_): index of x's rank, no
// larger than `bound` outside dim (and than src everywhere, for scatter_add).
void check_per_element(const char* op, const Handle& x, int dim, const Handle& index,
                       const Handle* src) {
  auto fail = [&] {
    throw ShapeError(fmt::format("{}: index {} does not fit x {}{} outside dim {}", op,
                                 format_dims(index->shape), format_dims(x->shape),
                                 src ? " and src " + format_dims((*src)->shape) : std::string(),
                                 dim));
  };
  if (index->rank() != x->rank() || (src && (*src)->rank() != x->rank())) fail();
  for (int d = 0; d < x->rank(); ++d) {
    if (d != dim && index->shape[d] > x->shape[d]) fail();
    if (src && index->shape[d] > (*src)->shape[d]) fail();
  }
}

}  // namespace

Handle gather(const Handle& x, int dim, const Handle& index) {
  check_operands("gather", x, index, nullptr);
  check_per_element("gather", x, dim, index, nullptr);
  Dims extents = index->shape;
  extents[dim] = x->shape[dim];
  return run("gather", IndexOp::gather, narrow_to(x, dim, extents), dim, index, nullptr,
             index->shape);
}

Handle index_select(const Handle& x, int dim, const Handle& index) {
  check_operands("index_select", x, index, nullptr);
  if (index->rank() != 1) {
    throw ShapeError(
        fmt::format("index_select: index must have rank 1, got {}", format_dims(index->shape)));
  }
  Dims shape = x->shape;
  shape[dim] = index->shape[0];
  return run("index_select", IndexOp::index_select, x, dim, index, nullptr, shape);
}

Handle scatter_add(const Handle& x, int dim, const Handle& index, const Handle& src) {
  check_operands("scatter_add", x, index, &src);
  check_per_element("scatter_add", x, dim, index, &src);
  const Handle s = narrow_to(src, dim, index->shape);
  const Handle sv =
      index->shape[dim] == src->shape[dim] ? s : slice(s, dim, 0, index->shape[dim], 1);
  Dims extents = index->shape;
  extents[dim] = x->shape[dim];
  if (extents == x->shape)
    return run("scatter_add", IndexOp::scatter_add, x, dim, index, &sv, x->shape);
  // An index smaller than x outside dim: scatter into that part of x, then copy x and the part
  // into the result (the rest of x is unchanged), as cat writes its slices.
  const Handle part = run("scatter_add", IndexOp::scatter_add, narrow_to(x, dim, extents), dim,
                          index, &sv, extents);
  Backend& be = backend_of(x->device);
  Handle out = allocate("scatter_add", be, x->shape, x->dtype);
  ir::Program copy;
  copy.output(copy.input(x->dtype));
  const TensorImpl* whole_in[] = {x.get()};
  const TensorImpl* whole_out[] = {out.get()};
  be.elementwise(copy, whole_in, {}, detail::Outs(whole_out));
  const Handle target = narrow_to(out, dim, extents);
  const TensorImpl* part_in[] = {part.get()};
  const TensorImpl* part_out[] = {target.get()};
  be.elementwise(copy, part_in, {}, detail::Outs(part_out));
  return out;
}

Handle index_add(const Handle& x, int dim, const Handle& index, const Handle& src) {
  check_operands("index_add", x, index, &src);
  if (index->rank() != 1) {
    throw ShapeError(
        fmt::format("index_add: index must have rank 1, got {}", format_dims(index->shape)));
  }
  Dims want = x->shape;
  want[dim] = index->shape[0];
  if (src->shape != want) {
    throw ShapeError(fmt::format(
        "index_add: src {} for x {} and {} indices along dim {} "
        "(expected {})",
        format_dims(src->shape), format_dims(x->shape), index->shape[0], dim, format_dims(want)));
  }
  return run("index_add", IndexOp::index_add, x, dim, index, &src, x->shape);
}

namespace {
// Runs f, renaming a synchronous IndexError of the op it is built on after `op`.
template <class F>
Handle renamed(const char* op, const char* inner, F f) {
  try {
    return f();
  } catch (const IndexError& e) {
    std::string what = e.what();
    if (what.rfind(inner, 0) == 0) what = op + what.substr(std::string(inner).size());
    throw IndexError(what);
  }
}
}  // namespace

Handle one_hot(const Handle& index, std::int64_t n, DType dtype) {
  if (index->dtype != DType::i32) {
    throw DTypeError(fmt::format("one_hot: index must be i32, got {}", dtype_name(index->dtype)));
  }
  if (n < 1) throw ValueError(fmt::format("one_hot: needs n >= 1 classes, got {}", n));
  const std::int64_t m = index->numel();
  const Handle flat = reshape(contiguous(index), {m, 1});
  const Handle zeros = full({m, n}, Scalar{0, true}, DType::i32, index->device);
  const Handle ones = full({m, 1}, Scalar{1, true}, DType::i32, index->device);
  Dims shape = index->shape;
  shape.push_back(n);
  return renamed("one_hot", "scatter_add", [&] {
    const Handle r = reshape(scatter_add(zeros, 1, flat, ones), shape);
    return dtype == DType::i32 ? r : cast(r, dtype);
  });
}

Handle embedding(const Handle& weight, const Handle& ids) {
  if (weight->rank() != 2) {
    throw ShapeError(fmt::format("embedding: weight must be [rows, features], got {}",
                                 format_dims(weight->shape)));
  }
  if (ids->dtype != DType::i32) {
    throw DTypeError(fmt::format("embedding: ids must be i32, got {}", dtype_name(ids->dtype)));
  }
  Dims shape = ids->shape;
  shape.push_back(weight->shape[1]);
  return renamed("embedding", "index_select", [&] {
    return reshape(index_select(weight, 0, reshape(contiguous(ids), {ids->numel()})), shape);
  });
}

Handle flip(const Handle& x, std::span<const int> dims) {
  std::vector<bool> seen(static_cast<std::size_t>(x->rank()));
  for (const int d : dims) {
    if (seen[static_cast<std::size_t>(d)])
      throw ValueError(
          fmt::format("flip: dim {} is named twice in [{}]", d, fmt::join(dims, ", ")));
    seen[static_cast<std::size_t>(d)] = true;
  }
  Handle out = x;  // (tensors are values: nothing flipped is x itself)
  for (const int d : dims) {
    const std::int64_t n = x->shape[static_cast<std::size_t>(d)];
    if (n < 2) continue;
    std::vector<std::int32_t> reversed(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      reversed[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(n - 1 - i);
    out = index_select(out, d,
                       from_data(reversed.data(), reversed.size(), DType::i32, {n}, x->device));
  }
  return out;
}

}  // namespace kiln::detail
