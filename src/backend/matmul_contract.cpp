// The contract of Backend::matmul, checked by every backend before it picks a kernel: the front
// end has checked already, but a direct backend call must get the same errors, not a wrong
// kernel or a read out of bounds.
#include <string>

#include "backend/backend.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

[[noreturn]] void shape_error(const TensorImpl& a, const TensorImpl& c, const TensorImpl& out) {
  throw ShapeError("matmul: cannot multiply " + format_dims(a.shape) + " x " +
                   format_dims(c.shape) + " into " + format_dims(out.shape) +
                   " (expected [B, m, k] x [B, k, n] into a contiguous [B, m, n])");
}

}  // namespace

void check_matmul_call(const TensorImpl& a, const TensorImpl& c, const TensorImpl& out) {
  if (!is_floating(a.dtype) || c.dtype != a.dtype || out.dtype != a.dtype) {
    throw DTypeError(std::string("matmul: needs operands and output of one floating dtype, got ") +
                     dtype_name(a.dtype) + " x " + dtype_name(c.dtype) + " into " +
                     dtype_name(out.dtype));
  }
  if (a.rank() != 3 || c.rank() != 3 || out.rank() != 3) shape_error(a, c, out);
  const std::int64_t batch = a.shape[0], m = a.shape[1], k = a.shape[2], n = c.shape[2];
  if (c.shape[0] != batch || c.shape[1] != k || out.shape != Dims{batch, m, n} ||
      !out.is_contiguous()) {
    shape_error(a, c, out);
  }
}

}  // namespace kiln::detail
