// Matrix products: rank 2 and batched rank 3, with batch broadcasting, as views over a [B, m, k].
#include <fmt/format.h>

#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

// x as [B, rows, cols]: a rank-2 x is one batch that broadcasts (stride 0).
TensorImpl as_batched(const TensorImpl& x, std::int64_t batch) {
  TensorImpl v = x;
  if (x.rank() == 2) {
    v.shape.insert(v.shape.begin(), batch);
    v.strides.insert(v.strides.begin(), 0);
  } else if (x.shape[0] == 1 && batch != 1) {
    v.shape[0] = batch;
    v.strides[0] = 0;
  }
  return v;
}

}  // namespace

// On autocast's lower-precision list: under a guard, floating operands are cast to its dtype
// first (element-wise casts, which fuse into their producers and which autodiff differentiates
// back to the operands' dtypes), and the product is of that dtype.
Handle matmul(const Handle& a_in, const Handle& b_in) {
  Device d = common_device("matmul", {&a_in, &b_in});
  const Handle a = autocast_lower(a_in), b = autocast_lower(b_in);
  Backend& be = backend_of(d);
  if (a->dtype != b->dtype) {
    throw DTypeError(
        fmt::format("matmul: operands of different dtypes, {} x {} (convert one with "
                    ".to(dtype))",
                    dtype_name(a->dtype), dtype_name(b->dtype)));
  }
  const DType dtypes[] = {a->dtype, b->dtype};
  if (!be.supports(BackendOp::matmul, dtypes)) {
    throw DTypeError(fmt::format("matmul: {} does not run {} x {} operands", be.name(),
                                 dtype_name(a->dtype), dtype_name(b->dtype)));
  }
  for (const Handle* t : {&a, &b}) {
    if ((*t)->rank() != 2 && (*t)->rank() != 3) {
      throw ShapeError(fmt::format("matmul: needs rank 2 or 3, got {}", format_dims((*t)->shape)));
    }
  }
  const std::int64_t m = a->shape[a->rank() - 2], k = a->shape[a->rank() - 1];
  const std::int64_t k2 = b->shape[b->rank() - 2], n = b->shape[b->rank() - 1];
  if (k != k2) {
    throw ShapeError(fmt::format("matmul: inner dimensions differ: {} x {}", format_dims(a->shape),
                                 format_dims(b->shape)));
  }
  std::int64_t ba = a->rank() == 3 ? a->shape[0] : 1, bb = b->rank() == 3 ? b->shape[0] : 1;
  if (ba != bb && ba != 1 && bb != 1) {
    throw ShapeError(fmt::format("matmul: batch dimensions differ: {} x {}", format_dims(a->shape),
                                 format_dims(b->shape)));
  }
  const std::int64_t batch = ba == 1 ? bb : ba;
  Handle out = allocate("matmul", be, {batch, m, n}, a->dtype);
  if (out->numel() > 0) be.matmul(as_batched(*a, batch), as_batched(*b, batch), detail::Out(*out));
  if (a->rank() == 2 && b->rank() == 2) return view(*out, {m, n}, {n, 1}, out->offset);
  return out;
}

}  // namespace kiln::detail
