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

namespace kiln::detail {
namespace {

void require_vector(const char* what, const TensorImpl& t, std::int64_t n, DType dtype) {
  if (t.dtype != dtype) {
    throw DTypeError(std::string("matmul_epilogue: ") + what + " must be " + dtype_name(dtype) +
                     " (the output's dtype), got " + dtype_name(t.dtype));
  }
  if (t.shape != Dims{n} || !t.is_contiguous()) {
    throw ShapeError(std::string("matmul_epilogue: ") + what + " must be a contiguous [" +
                     std::to_string(n) + "], got " + format_dims(t.shape));
  }
}

}  // namespace

void check_matmul_epilogue_call(const TensorImpl& a, const TensorImpl& c, const MatmulEpilogue& e,
                                const TensorImpl& out) {
  check_matmul_call(a, c, out);
  const std::int64_t n = out.shape[2];
  if (e.bias) require_vector("bias", *e.bias, n, out.dtype);
  if (e.pre_activation) {
    if (e.activation == EpilogueActivation::none)
      throw ValueError("matmul_epilogue: pre_activation without an activation (it would be out)");
    const TensorImpl& z = **e.pre_activation;
    if (z.dtype != out.dtype || z.shape != out.shape || !z.is_contiguous()) {
      throw ShapeError("matmul_epilogue: pre_activation must be a contiguous " +
                       format_dims(out.shape) + " " + dtype_name(out.dtype) + ", got " +
                       format_dims(z.shape) + " " + dtype_name(z.dtype));
    }
  }
}

}  // namespace kiln::detail
